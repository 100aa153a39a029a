// geasync_twin_check_onnx: the model check behind `python -m geasync check`, as one line-oriented text report.
#include <cstring>
#include <string>

#include "../onnx/engine.h"
#include "twin/twin_control.h"

namespace {

// Names and messages go into tab-separated lines: tabs and line breaks inside them become spaces.
std::string Clean(const std::string &s) {
  std::string out = s;
  for (char &c : out)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return out;
}

void AddValue(std::string *text, const char *kind, const twin::onnx::ValueInfo &vi) {
  *text += std::string(kind) + "\t" + Clean(vi.name) + "\t" + twin::onnx::ElemTypeName(vi.desc.dtype) + "\t";
  for (size_t i = 0; i < vi.desc.dims.size(); ++i) *text += (i ? "," : "") + std::to_string(vi.desc.dims[i]);
  *text += "\n";
}

}  // namespace

extern "C" size_t geasync_twin_check_onnx(const void *data, size_t size, char *buf, size_t cap) {
  std::string text;
  try {
    twin::onnx::ModelCheck r;
    twin::onnx::CheckModel(data, size, &r);
    text = "ir_version\t" + std::to_string(r.ir_version) + "\nopset\t" + std::to_string(r.opset) + "\n";
    for (const auto &vi : r.inputs) AddValue(&text, "input", vi);
    for (const auto &vi : r.outputs) AddValue(&text, "output", vi);
    for (const auto &p : r.problems) text += "problem\t" + Clean(p) + "\n";
  } catch (...) {
    text = "problem\tout of memory while checking the model\n";
  }
  if (buf && cap) {
    const size_t n = text.size() < cap - 1 ? text.size() : cap - 1;
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}
