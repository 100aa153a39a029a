// Bounds-checked reader for the protobuf wire format (varint, fixed64, length-delimited, fixed32), used to
// decode ONNX ModelProto without a protobuf library. Every read checks the remaining length first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace twin {
namespace onnx {

enum WireType : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Reads one message occupying [begin, end) of a buffer. Offsets in messages are absolute, so errors can point
// at the byte in the whole model. Errors are "corrupt ONNX model: ..." strings.
class ProtoReader {
 public:
  ProtoReader(const uint8_t *base, size_t begin, size_t end) : base_(base), pos_(begin), end_(end) {}

  bool done() const { return pos_ >= end_; }
  size_t pos() const { return pos_; }

  // Next field key. Rejects field number 0 and the (proto2-only) group wire types.
  bool ReadTag(uint32_t *field, int *wire, std::string *err);
  bool ReadVarint(uint64_t *v, std::string *err);
  bool ReadFixed32(uint32_t *v, std::string *err);
  bool ReadFixed64(uint64_t *v, std::string *err);
  // Length-delimited payload: returns a reader over it and advances past it.
  bool ReadSub(ProtoReader *sub, std::string *err);
  bool ReadString(std::string *s, std::string *err);
  bool Skip(int wire, std::string *err);

  // Typed field readers: check the wire type, accept packed and unpacked repeated encodings.
  bool Int64Field(int wire, int64_t *v, std::string *err);
  bool FloatField(int wire, float *v, std::string *err);
  bool StringField(int wire, std::string *s, std::string *err);
  bool SubField(int wire, ProtoReader *sub, std::string *err);
  bool RepeatedInt64(int wire, std::vector<int64_t> *v, std::string *err);
  bool RepeatedUint64(int wire, std::vector<uint64_t> *v, std::string *err);
  bool RepeatedFloat(int wire, std::vector<float> *v, std::string *err);
  bool RepeatedDouble(int wire, std::vector<double> *v, std::string *err);

 private:
  bool Fail(const char *what, std::string *err) const;
  bool WrongWire(int wire, std::string *err) const;

  const uint8_t *base_;
  size_t pos_;
  size_t end_;
};

}  // namespace onnx
}  // namespace twin
