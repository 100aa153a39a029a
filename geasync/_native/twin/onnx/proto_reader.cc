// Bounds-checked protobuf wire-format reader (see proto_reader.h). No allocation is sized by untrusted
// counts: repeated fields grow only by what the bytes actually contain.
#include "proto_reader.h"

#include <cstring>

namespace twin {
namespace onnx {

bool ProtoReader::Fail(const char *what, std::string *err) const {
  *err = std::string("corrupt ONNX model: ") + what + " at byte " + std::to_string(pos_);
  return false;
}

bool ProtoReader::WrongWire(int wire, std::string *err) const {
  *err = "corrupt ONNX model: unexpected wire type " + std::to_string(wire) + " at byte " + std::to_string(pos_);
  return false;
}

bool ProtoReader::ReadVarint(uint64_t *v, std::string *err) {
  uint64_t result = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (pos_ >= end_) return Fail("truncated varint", err);
    uint8_t b = base_[pos_++];
    if (shift == 63 && (b & 0x7e)) return Fail("malformed varint", err);
    result |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = result;
      return true;
    }
  }
  return Fail("malformed varint", err);
}

bool ProtoReader::ReadTag(uint32_t *field, int *wire, std::string *err) {
  size_t start = pos_;
  uint64_t key;
  if (!ReadVarint(&key, err)) return false;
  uint64_t f = key >> 3;
  int w = static_cast<int>(key & 7);
  if (f == 0 || f > 0x1fffffff) {
    pos_ = start;
    return Fail("invalid field number", err);
  }
  if (w != kVarint && w != kFixed64 && w != kLengthDelimited && w != kFixed32) {
    pos_ = start;
    return Fail("unsupported wire type", err);
  }
  *field = static_cast<uint32_t>(f);
  *wire = w;
  return true;
}

bool ProtoReader::ReadFixed32(uint32_t *v, std::string *err) {
  if (end_ - pos_ < 4) return Fail("truncated fixed32", err);
  uint32_t x = 0;
  for (int i = 3; i >= 0; --i) x = (x << 8) | base_[pos_ + i];
  pos_ += 4;
  *v = x;
  return true;
}

bool ProtoReader::ReadFixed64(uint64_t *v, std::string *err) {
  if (end_ - pos_ < 8) return Fail("truncated fixed64", err);
  uint64_t x = 0;
  for (int i = 7; i >= 0; --i) x = (x << 8) | base_[pos_ + i];
  pos_ += 8;
  *v = x;
  return true;
}

bool ProtoReader::ReadSub(ProtoReader *sub, std::string *err) {
  uint64_t len;
  if (!ReadVarint(&len, err)) return false;
  if (len > end_ - pos_) return Fail("length-delimited field runs past the end of its message", err);
  *sub = ProtoReader(base_, pos_, pos_ + static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return true;
}

bool ProtoReader::ReadString(std::string *s, std::string *err) {
  ProtoReader sub(base_, 0, 0);
  if (!ReadSub(&sub, err)) return false;
  s->assign(reinterpret_cast<const char *>(base_ + sub.pos_), sub.end_ - sub.pos_);
  return true;
}

bool ProtoReader::Skip(int wire, std::string *err) {
  switch (wire) {
    case kVarint: {
      uint64_t v;
      return ReadVarint(&v, err);
    }
    case kFixed64: {
      uint64_t v;
      return ReadFixed64(&v, err);
    }
    case kFixed32: {
      uint32_t v;
      return ReadFixed32(&v, err);
    }
    case kLengthDelimited: {
      ProtoReader sub(base_, 0, 0);
      return ReadSub(&sub, err);
    }
    default:
      return WrongWire(wire, err);
  }
}

bool ProtoReader::Int64Field(int wire, int64_t *v, std::string *err) {
  if (wire != kVarint) return WrongWire(wire, err);
  uint64_t u;
  if (!ReadVarint(&u, err)) return false;
  *v = static_cast<int64_t>(u);
  return true;
}

bool ProtoReader::FloatField(int wire, float *v, std::string *err) {
  if (wire != kFixed32) return WrongWire(wire, err);
  uint32_t u;
  if (!ReadFixed32(&u, err)) return false;
  std::memcpy(v, &u, 4);
  return true;
}

bool ProtoReader::StringField(int wire, std::string *s, std::string *err) {
  if (wire != kLengthDelimited) return WrongWire(wire, err);
  return ReadString(s, err);
}

bool ProtoReader::SubField(int wire, ProtoReader *sub, std::string *err) {
  if (wire != kLengthDelimited) return WrongWire(wire, err);
  return ReadSub(sub, err);
}

bool ProtoReader::RepeatedInt64(int wire, std::vector<int64_t> *v, std::string *err) {
  if (wire == kVarint) {
    uint64_t u;
    if (!ReadVarint(&u, err)) return false;
    v->push_back(static_cast<int64_t>(u));
    return true;
  }
  if (wire != kLengthDelimited) return WrongWire(wire, err);
  ProtoReader sub(base_, 0, 0);
  if (!ReadSub(&sub, err)) return false;
  while (!sub.done()) {
    uint64_t u;
    if (!sub.ReadVarint(&u, err)) return false;
    v->push_back(static_cast<int64_t>(u));
  }
  return true;
}

bool ProtoReader::RepeatedUint64(int wire, std::vector<uint64_t> *v, std::string *err) {
  if (wire == kVarint) {
    uint64_t u;
    if (!ReadVarint(&u, err)) return false;
    v->push_back(u);
    return true;
  }
  if (wire != kLengthDelimited) return WrongWire(wire, err);
  ProtoReader sub(base_, 0, 0);
  if (!ReadSub(&sub, err)) return false;
  while (!sub.done()) {
    uint64_t u;
    if (!sub.ReadVarint(&u, err)) return false;
    v->push_back(u);
  }
  return true;
}

bool ProtoReader::RepeatedFloat(int wire, std::vector<float> *v, std::string *err) {
  if (wire == kFixed32) {
    float f;
    if (!FloatField(wire, &f, err)) return false;
    v->push_back(f);
    return true;
  }
  if (wire != kLengthDelimited) return WrongWire(wire, err);
  ProtoReader sub(base_, 0, 0);
  if (!ReadSub(&sub, err)) return false;
  if ((sub.end_ - sub.pos_) % 4 != 0) return Fail("packed float field length is not a multiple of 4", err);
  v->reserve(v->size() + (sub.end_ - sub.pos_) / 4);
  while (!sub.done()) {
    float f;
    if (!sub.FloatField(kFixed32, &f, err)) return false;
    v->push_back(f);
  }
  return true;
}

bool ProtoReader::RepeatedDouble(int wire, std::vector<double> *v, std::string *err) {
  if (wire == kFixed64) {
    uint64_t u;
    if (!ReadFixed64(&u, err)) return false;
    double d;
    std::memcpy(&d, &u, 8);
    v->push_back(d);
    return true;
  }
  if (wire != kLengthDelimited) return WrongWire(wire, err);
  ProtoReader sub(base_, 0, 0);
  if (!ReadSub(&sub, err)) return false;
  if ((sub.end_ - sub.pos_) % 8 != 0) return Fail("packed double field length is not a multiple of 8", err);
  v->reserve(v->size() + (sub.end_ - sub.pos_) / 8);
  while (!sub.done()) {
    uint64_t u;
    if (!sub.ReadFixed64(&u, err)) return false;
    double d;
    std::memcpy(&d, &u, 8);
    v->push_back(d);
  }
  return true;
}

}  // namespace onnx
}  // namespace twin
