// Control flow: If, Loop, Scan. Their subgraphs are models of their own (built by ParseModel; the outer-scope values
// they read are the node's trailing implicit inputs), compiled into plans of their own and run by the kernel.
// Output shapes come from inferring the subgraph for the node's input descs. When that cannot settle them (a branch
// chosen by a run-time condition giving other shapes, a loop whose trip count or carried shapes depend on values),
// inference asks for the contents of the node's inputs (the value-dependent plan machinery binds them) and, once
// they are all known, runs the subgraph to learn the shapes; the kernel then computes the same values again.
#include <algorithm>
#include <cstring>

#include "analysis.h"
#include "elem.h"

namespace twin {
namespace onnx {
namespace {

constexpr size_t kMaxCachedPlans = 8;  // per subgraph: plans for distinct input shapes

// A tensor the control-flow code owns (subgraph outputs, loop state, accumulated scan outputs).
struct HostTensor {
  TensorDesc desc;
  std::vector<uint8_t> bytes;
  const void *data() const { return bytes.empty() ? EmptyTensorData() : bytes.data(); }
  void *mutable_data() { return bytes.empty() ? const_cast<void *>(EmptyTensorData()) : bytes.data(); }
};

bool SameDesc(const TensorDesc &a, const TensorDesc &b) { return a.dtype == b.dtype && a.dims == b.dims; }

size_t ExplicitInputs(const Node &n) { return n.input_names.size() - n.implicit_inputs; }

// A subgraph and how its inputs are fed: its declared inputs by the op, its captured ones from node inputs.
struct Subgraph {
  std::string attr;
  std::shared_ptr<const ModelImpl> g;
  size_t declared = 0;                // declared inputs (the captured ones follow in g->inputs_)
  std::vector<size_t> capture_input;  // per captured name: the node's input index

  size_t outputs() const { return g->outputs_.size(); }
};

bool FindSubgraph(const Node &n, const char *attr, Subgraph *s, std::string *reason) {
  const Attribute *a = n.FindAttr(attr);
  if (!a || a->type != kAttrGraph || !a->g) {
    *reason = a ? "attribute '" + std::string(attr) + "' must be a graph" : "graph attribute '" + std::string(attr) +
                                                                                "' is required";
    return false;
  }
  s->attr = attr;
  s->g = a->g;
  s->declared = a->g->inputs_.size() - a->g->captured_.size();
  s->capture_input.clear();
  for (const std::string &name : a->g->captured_) {
    size_t i = ExplicitInputs(n);
    while (i < n.input_names.size() && n.input_names[i] != name) ++i;
    if (i == n.input_names.size()) {  // cannot happen: ParseModel appends every captured name
      *reason = "subgraph '" + s->attr + "' reads '" + name + "', which the node does not provide";
      return false;
    }
    s->capture_input.push_back(i);
  }
  return true;
}

// The subgraph's input descs/contents: the declared ones given, the captured ones from the node's inputs.
void SubgraphInputs(const Subgraph &s, const std::vector<const TensorDesc *> &node_in,
                    const std::vector<const void *> &node_data, std::vector<TensorDesc> *descs,
                    std::vector<const void *> *data) {
  descs->resize(s.declared);
  data->resize(s.declared);
  for (size_t i : s.capture_input) {
    descs->push_back(*node_in[i]);
    data->push_back(node_data[i]);
  }
}

// Infers the subgraph's output descs. On failure *needed (per subgraph input) marks the inputs whose contents
// would settle the shape that could not be determined (all zero when the failure is of another kind).
bool InferSubgraph(const Subgraph &s, const std::vector<TensorDesc> &descs, const std::vector<const void *> &data,
                   bool need_static, std::vector<TensorDesc> *out, std::vector<char> *needed, std::string *reason) {
  needed->assign(descs.size(), 0);
  Analysis a;
  std::string err;
  if (!Analyze(*s.g, descs, need_static, &a, &err, &data)) {
    if (a.missing_value >= 0) MarkInputAncestors(*s.g, a.missing_value, needed);
    *reason = "subgraph '" + s.attr + "': " + err;
    return false;
  }
  out->clear();
  for (int vid : s.g->output_values_) out->push_back(a.desc[vid]);
  return true;
}

// The first node input, among those marked (or all when none is), whose contents are not known now.
int FirstUnknownInput(const InferCtx &c, const std::vector<char> *marked) {
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < c.in.size(); ++i) {
      if (!c.has(i) || c.in_data[i]) continue;
      if (pass == 0 && marked && !(*marked)[i]) continue;
      return static_cast<int>(i);
    }
  }
  return -1;
}

// Descs that agree where a and b agree and are unknown elsewhere (shape inference without static needs; node
// outputs always have a rank, so ranks that differ give a's rank, all unknown).
TensorDesc MergeDescs(const TensorDesc &a, const TensorDesc &b) {
  if (a.dims.size() != b.dims.size() || a.IsUnknownRank() || b.IsUnknownRank()) {
    const TensorDesc &r = a.IsUnknownRank() ? b : a;
    return {a.dtype, std::vector<int64_t>(r.IsUnknownRank() ? 0 : r.dims.size(), -1)};
  }
  TensorDesc d = a;
  for (size_t i = 0; i < d.dims.size(); ++i)
    if (a.dims[i] != b.dims[i]) d.dims[i] = -1;
  return d;
}

bool ReadBoolScalar(const TensorDesc &d, const void *p, const char *what, bool *v, std::string *reason) {
  if (d.dtype != ElemType::kBool || d.NumElements() != 1) {
    *reason = std::string(what) + " must be a bool tensor of one element, got " + DescStr(d);
    return false;
  }
  *v = *static_cast<const uint8_t *>(p) != 0;
  return true;
}

bool ReadInt64Scalar(const TensorDesc &d, const void *p, const char *what, int64_t *v, std::string *reason) {
  if (d.dtype != ElemType::kInt64 || d.NumElements() != 1) {
    *reason = std::string(what) + " must be an int64 tensor of one element, got " + DescStr(d);
    return false;
  }
  std::memcpy(v, p, sizeof(*v));
  return true;
}

// Compiles the subgraph per distinct input descs (a few kept) and runs it; value-dependent plans are specialised
// on the inputs' contents at each run. memory_limit: the enclosing plan's (0: the machine's memory).
class SubgraphRunner {
 public:
  SubgraphRunner(Subgraph s, uint64_t memory_limit) : s_(std::move(s)), memory_limit_(memory_limit) {}
  const Subgraph &subgraph() const { return s_; }

  bool Run(const std::vector<TensorDesc> &descs, const std::vector<const void *> &in, std::vector<HostTensor> *outs,
           std::string *reason) {
    std::string err;
    Plan *plan = PlanFor(descs, &err);
    std::shared_ptr<Plan> special;
    if (plan && plan->value_dependent()) plan = (special = plan->Specialize(in, &err)).get();
    if (!plan) {
      *reason = "subgraph '" + s_.attr + "': " + err;
      return false;
    }
    const std::vector<TensorDesc> &od = plan->output_descs();
    outs->resize(od.size());
    out_ptrs_.resize(od.size());
    for (size_t o = 0; o < od.size(); ++o) {
      (*outs)[o].desc = od[o];
      (*outs)[o].bytes.resize(od[o].Bytes());
      out_ptrs_[o] = (*outs)[o].mutable_data();
    }
    if (plan->Run(in, out_ptrs_, &err)) return true;
    *reason = "subgraph '" + s_.attr + "': " + err;
    return false;
  }

 private:
  Plan *PlanFor(const std::vector<TensorDesc> &descs, std::string *err) {
    for (auto &e : cache_) {
      bool same = e.first.size() == descs.size();
      for (size_t i = 0; same && i < descs.size(); ++i) same = SameDesc(e.first[i], descs[i]);
      if (same) return e.second.get();
    }
    CompileOptions options;
    options.allow_value_dependent = true;
    options.max_memory_bytes = memory_limit_;
    std::unique_ptr<Plan> plan = CompilePlan(s_.g, descs, options, err);
    if (!plan) return nullptr;
    if (cache_.size() >= kMaxCachedPlans) cache_.erase(cache_.begin());
    cache_.emplace_back(descs, std::move(plan));
    return cache_.back().second.get();
  }

  Subgraph s_;
  uint64_t memory_limit_;
  std::vector<std::pair<std::vector<TensorDesc>, std::unique_ptr<Plan>>> cache_;
  std::vector<void *> out_ptrs_;
};

// Copies computed outputs into the kernel's buffers after checking they have the shapes inferred at compile time.
bool DeliverOutputs(const std::vector<HostTensor> &got, const std::vector<TensorDesc> &want, void *const *out,
                    const char *what, std::string *reason) {
  for (size_t o = 0; o < want.size(); ++o) {
    if (!SameDesc(got[o].desc, want[o])) {
      *reason = std::string(what) + " output " + std::to_string(o) + " is " + DescStr(got[o].desc) + ", but " +
                DescStr(want[o]) + " was inferred when the graph was compiled";
      return false;
    }
    CopyBytes(out[o], got[o].data(), got[o].bytes.size());
  }
  return true;
}

// ---- If ----

bool IfBranches(const Node &n, Subgraph *then_g, Subgraph *else_g, std::string *reason) {
  if (!FindSubgraph(n, "then_branch", then_g, reason) || !FindSubgraph(n, "else_branch", else_g, reason))
    return false;
  for (const Subgraph *s : {then_g, else_g}) {
    if (s->declared != 0) {
      *reason = "subgraph '" + s->attr + "' must declare no inputs, it declares " + std::to_string(s->declared);
      return false;
    }
    if (s->outputs() != n.output_names.size()) {
      *reason = "subgraph '" + s->attr + "' has " + std::to_string(s->outputs()) + " outputs, the node " +
                std::to_string(n.output_names.size());
      return false;
    }
  }
  return true;
}

bool CheckIf(const Node &n, int64_t, std::string *reason) {
  Subgraph t, e;
  return IfBranches(n, &t, &e, reason);
}

// Maps a branch's needed inputs (all captured) to node inputs.
std::vector<char> NodeInputsNeeded(const Subgraph &s, const std::vector<char> &needed, size_t node_inputs) {
  std::vector<char> marked(node_inputs, 0);
  for (size_t j = 0; j < s.capture_input.size(); ++j)
    if (needed[s.declared + j]) marked[s.capture_input[j]] = 1;
  return marked;
}

bool InferBranch(InferCtx *c, const Subgraph &s, std::vector<TensorDesc> *out, std::string *reason) {
  std::vector<TensorDesc> descs;
  std::vector<const void *> data;
  SubgraphInputs(s, c->in, c->in_data, &descs, &data);
  std::vector<char> needed;
  if (InferSubgraph(s, descs, data, c->need_static, out, &needed, reason)) return true;
  const std::vector<char> marked = NodeInputsNeeded(s, needed, c->in.size());
  for (size_t i = 0; i < marked.size(); ++i)
    if (marked[i] && !c->in_data[i]) c->missing_input = static_cast<int>(i);
  return false;
}

bool InferIf(InferCtx *c, std::string *reason) {
  Subgraph then_g, else_g;
  if (!IfBranches(*c->node, &then_g, &else_g, reason)) return false;
  const TensorDesc &cd = *c->in[0];
  if (cd.dtype != ElemType::kBool || (cd.IsStatic() && cd.NumElements() != 1)) {
    *reason = "input 'cond' must be a bool tensor of one element, got " + DescStr(cd);
    return false;
  }
  if (c->in_data[0] && cd.IsStatic()) {  // the branch is known: only it matters
    bool cond;
    if (!ReadBoolScalar(cd, c->in_data[0], "input 'cond'", &cond, reason)) return false;
    return InferBranch(c, cond ? then_g : else_g, &c->out, reason);
  }
  std::vector<TensorDesc> t, e;
  if (!InferBranch(c, then_g, &t, reason) || !InferBranch(c, else_g, &e, reason)) return false;
  for (size_t o = 0; o < t.size(); ++o) {
    if (t[o].dtype != e[o].dtype) {
      *reason = "output " + std::to_string(o) + " is " + ElemTypeName(t[o].dtype) + " in then_branch but " +
                ElemTypeName(e[o].dtype) + " in else_branch";
      return false;
    }
    if (SameDesc(t[o], e[o])) {
      c->out[o] = t[o];
    } else if (!c->need_static) {
      c->out[o] = MergeDescs(t[o], e[o]);
    } else {
      c->missing_input = 0;
      *reason = "output " + std::to_string(o) + " is " + DescStr(t[o]) + " in then_branch but " + DescStr(e[o]) +
                " in else_branch, so its shape depends on input 'cond', which is not a compile-time constant";
      return false;
    }
  }
  return true;
}

// The kernel keeps copies of the input descs (the KernelCtx's pointers do not outlive prepare).
std::vector<TensorDesc> CopyDescs(const std::vector<const TensorDesc *> &in) {
  std::vector<TensorDesc> d;
  for (const TensorDesc *p : in) d.push_back(p ? *p : TensorDesc());
  return d;
}

std::vector<const TensorDesc *> DescPtrs(const std::vector<TensorDesc> &d, const std::vector<const TensorDesc *> &in) {
  std::vector<const TensorDesc *> p;
  for (size_t i = 0; i < d.size(); ++i) p.push_back(in[i] ? &d[i] : nullptr);
  return p;
}

// Kernels that keep their input descs.
class ControlKernel : public Kernel {
 protected:
  explicit ControlKernel(const KernelCtx &c)
      : in_storage_(CopyDescs(c.in)), in_(DescPtrs(in_storage_, c.in)), out_(c.out) {}
  std::vector<TensorDesc> in_storage_;
  std::vector<const TensorDesc *> in_;
  std::vector<TensorDesc> out_;
};

class IfKernel : public ControlKernel {
 public:
  IfKernel(const KernelCtx &c, Subgraph then_g, Subgraph else_g)
      : ControlKernel(c), then_(std::move(then_g), c.memory_limit), else_(std::move(else_g), c.memory_limit),
        data_(c.in.size()) {}

  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    bool cond;
    if (!ReadBoolScalar(*in_[0], in[0], "input 'cond'", &cond, reason)) return false;
    SubgraphRunner &r = cond ? then_ : else_;
    data_.assign(in, in + in_.size());
    SubgraphInputs(r.subgraph(), in_, data_, &descs_, &ptrs_);
    if (!r.Run(descs_, ptrs_, &outs_, reason)) return false;
    return DeliverOutputs(outs_, out_, out, cond ? "then_branch" : "else_branch", reason);
  }

 private:
  SubgraphRunner then_, else_;
  std::vector<const void *> data_, ptrs_;
  std::vector<TensorDesc> descs_;
  std::vector<HostTensor> outs_;
};

// ---- Loop and Scan share the run-the-body machinery ----

// Appends one iteration's scan output to an accumulation, checking its shape is the same every iteration.
bool AppendScan(const HostTensor &t, size_t k, HostTensor *acc, int64_t iter, std::string *reason) {
  if (iter == 0) {
    acc->desc = t.desc;
    acc->bytes.clear();
  } else if (!SameDesc(acc->desc, t.desc)) {
    *reason = "scan output " + std::to_string(k) + " is " + DescStr(t.desc) + " at iteration " +
              std::to_string(iter) + " but " + DescStr(acc->desc) + " before";
    return false;
  }
  acc->bytes.insert(acc->bytes.end(), t.bytes.begin(), t.bytes.end());
  return true;
}

// ---- Loop ----

struct LoopShape {
  size_t carried = 0, scans = 0;
};

// Every input from first on is present (only the leading optional ones may be omitted).
bool RequirePresent(const Node &n, size_t first, std::string *reason) {
  for (size_t i = first; i < ExplicitInputs(n); ++i) {
    if (!n.input_names[i].empty()) continue;
    *reason = "input " + std::to_string(i) + " is missing";
    return false;
  }
  return true;
}

bool LoopBody(const Node &n, Subgraph *body, LoopShape *ls, std::string *reason) {
  if (!FindSubgraph(n, "body", body, reason)) return false;
  if (ExplicitInputs(n) < 2) {
    *reason = "expects at least 2 inputs (M and cond, either may be empty), got " + std::to_string(ExplicitInputs(n));
    return false;
  }
  if (!RequirePresent(n, 2, reason)) return false;
  ls->carried = ExplicitInputs(n) - 2;
  if (n.output_names.size() < ls->carried) {
    *reason = "has " + std::to_string(ls->carried) + " loop-carried inputs but only " +
              std::to_string(n.output_names.size()) + " outputs";
    return false;
  }
  ls->scans = n.output_names.size() - ls->carried;
  if (body->declared != 2 + ls->carried || body->outputs() != 1 + ls->carried + ls->scans) {
    *reason = "subgraph 'body' must have " + std::to_string(2 + ls->carried) + " inputs and " +
              std::to_string(1 + ls->carried + ls->scans) + " outputs (iteration number, condition, " +
              std::to_string(ls->carried) + " loop-carried values; condition, loop-carried values, " +
              std::to_string(ls->scans) + " scan outputs), it has " + std::to_string(body->declared) + " and " +
              std::to_string(body->outputs());
    return false;
  }
  return true;
}

bool CheckLoop(const Node &n, int64_t, std::string *reason) {
  Subgraph body;
  LoopShape ls;
  return LoopBody(n, &body, &ls, reason);
}

// The body's iteration-number and condition inputs: scalars, or [1] where the body declares rank 1.
TensorDesc LoopScalarDesc(const Subgraph &body, size_t i, ElemType t) {
  const bool rank1 = body.g->input_rank_known_[i] && body.g->inputs_[i].desc.dims.size() == 1;
  return {t, rank1 ? std::vector<int64_t>{1} : std::vector<int64_t>{}};
}

// Runs a Loop on concrete inputs (node input order; nullptr = omitted): outputs final carried values, then the
// scan outputs stacked on a new first axis (scan_templates give their per-iteration descs for zero iterations).
class LoopRunner {
 public:
  LoopRunner(Subgraph body, LoopShape ls, uint64_t memory_limit)
      : runner_(std::move(body), memory_limit), ls_(ls),
        memory_limit_(memory_limit ? memory_limit : DefaultMemoryLimit()) {}

  bool Run(const std::vector<const TensorDesc *> &in, const void *const *data,
           const std::vector<TensorDesc> &scan_templates, std::vector<HostTensor> *outs, std::string *reason) {
    const Subgraph &body = runner_.subgraph();
    int64_t max_trip = INT64_MAX;
    bool cond = true;
    if (in[0] && !ReadInt64Scalar(*in[0], data[0], "input 'M'", &max_trip, reason)) return false;
    if (in[1] && !ReadBoolScalar(*in[1], data[1], "input 'cond'", &cond, reason)) return false;
    state_.resize(ls_.carried);
    for (size_t i = 0; i < ls_.carried; ++i) {
      state_[i].desc = *in[2 + i];
      const uint8_t *p = static_cast<const uint8_t *>(data[2 + i]);
      state_[i].bytes.assign(p, p + in[2 + i]->Bytes());
    }
    scans_.assign(ls_.scans, HostTensor());
    const TensorDesc iter_desc = LoopScalarDesc(body, 0, ElemType::kInt64);
    const TensorDesc cond_desc = LoopScalarDesc(body, 1, ElemType::kBool);
    int64_t t = 0;
    for (; t < max_trip && cond; ++t) {
      if (StopRequested()) {  // GE would run on; the twin must not keep its session's shutdown waiting
        *reason = "stopped after " + std::to_string(t) + " iterations: the session is shutting down";
        return false;
      }
      uint8_t cond_byte = 1;
      descs_.assign({iter_desc, cond_desc});
      ptrs_.assign({&t, &cond_byte});
      for (const HostTensor &s : state_) {
        descs_.push_back(s.desc);
        ptrs_.push_back(s.data());
      }
      for (size_t i : body.capture_input) {
        descs_.push_back(*in[i]);
        ptrs_.push_back(data[i]);
      }
      if (!runner_.Run(descs_, ptrs_, &body_out_, reason)) return false;
      if (!ReadBoolScalar(body_out_[0].desc, body_out_[0].data(), "subgraph 'body' output 0 (condition)", &cond,
                          reason))
        return false;
      for (size_t i = 0; i < ls_.carried; ++i) std::swap(state_[i], body_out_[1 + i]);
      for (size_t k = 0; k < ls_.scans; ++k)
        if (!AppendScan(body_out_[1 + ls_.carried + k], k, &scans_[k], t, reason)) return false;
      if (!WithinMemoryLimit(t, reason)) return false;
    }
    outs->resize(ls_.carried + ls_.scans);
    for (size_t i = 0; i < ls_.carried; ++i) std::swap((*outs)[i], state_[i]);
    for (size_t k = 0; k < ls_.scans; ++k) {
      HostTensor &o = (*outs)[ls_.carried + k];
      o.desc = t ? scans_[k].desc : scan_templates[k];
      o.desc.dims.insert(o.desc.dims.begin(), t);
      o.bytes.swap(scans_[k].bytes);
    }
    return true;
  }

 private:
  // What the loop holds between iterations (carried values and scan outputs so far) must fit the plan's limit: a
  // body's plan is checked alone, so a growing scan output would otherwise only stop at the machine's memory.
  bool WithinMemoryLimit(int64_t t, std::string *reason) const {
    uint64_t held = 0;
    for (const HostTensor &s : state_) held += s.bytes.size();
    for (const HostTensor &s : scans_) held += s.bytes.size();
    if (held <= memory_limit_) return true;
    *reason = MemoryLimitError("the loop's carried values and scan outputs after " + std::to_string(t + 1) +
                                   " iterations",
                               held, memory_limit_);
    return false;
  }

  SubgraphRunner runner_;
  LoopShape ls_;
  uint64_t memory_limit_;
  std::vector<HostTensor> state_, scans_, body_out_;
  std::vector<TensorDesc> descs_;
  std::vector<const void *> ptrs_;
};

// True when the body's condition output is its condition input passed through (directly or by Identity).
bool ConditionPassesThrough(const ModelImpl &body) {
  int v = body.output_values_[0];
  for (int hops = 0; hops <= static_cast<int>(body.nodes_.size()); ++hops) {
    const Value &val = body.values_[v];
    if (val.kind == ValueKind::kGraphInput) return val.index == 1;
    if (val.kind != ValueKind::kNodeOutput) return false;
    const Node &n = body.nodes_[val.index];
    if (n.op_type != "Identity" || n.inputs.empty() || n.inputs[0] < 0) return false;
    v = n.inputs[0];
  }
  return false;
}

// The trip count when it is known without running the body: M and cond known and the body passes cond through.
bool KnownTripCount(const InferCtx &c, const Subgraph &body, int64_t *trips, std::string *reason) {
  if (!ConditionPassesThrough(*body.g)) return false;
  bool cond = true;
  if (c.has(1) && (!c.in_data[1] || !ReadBoolScalar(*c.in[1], c.in_data[1], "input 'cond'", &cond, reason)))
    return false;
  if (!cond) {
    *trips = 0;
    return true;
  }
  if (!c.has(0) || !c.in_data[0] || !ReadInt64Scalar(*c.in[0], c.in_data[0], "input 'M'", trips, reason))
    return false;
  *trips = std::max<int64_t>(*trips, 0);
  return true;
}

std::vector<TensorDesc> LoopBodyDescs(const InferCtx &c, const Subgraph &body, const LoopShape &ls) {
  std::vector<TensorDesc> d = {LoopScalarDesc(body, 0, ElemType::kInt64), LoopScalarDesc(body, 1, ElemType::kBool)};
  for (size_t i = 0; i < ls.carried; ++i) d.push_back(*c.in[2 + i]);
  for (size_t i : body.capture_input) d.push_back(*c.in[i]);
  return d;
}

// Shapes known from the body's inference alone: carried values keep their shapes, the trip count is known (or
// there are no scan outputs). False (no error) when they are not.
bool InferLoopStatically(InferCtx *c, const Subgraph &body, const LoopShape &ls, std::vector<TensorDesc> *body_out) {
  std::vector<const void *> data(body.declared, nullptr);
  for (size_t i : body.capture_input) data.push_back(c->in_data[i]);
  std::vector<char> needed;
  std::string ignored;
  if (!InferSubgraph(body, LoopBodyDescs(*c, body, ls), data, c->need_static, body_out, &needed, &ignored))
    return false;
  for (size_t i = 0; i < ls.carried; ++i)
    if (!SameDesc((*body_out)[1 + i], *c->in[2 + i])) return false;
  int64_t trips = -1;
  if (ls.scans && !KnownTripCount(*c, body, &trips, &ignored)) {
    if (c->need_static) return false;
    trips = -1;
  }
  for (size_t i = 0; i < ls.carried; ++i) c->out[i] = *c->in[2 + i];
  for (size_t k = 0; k < ls.scans; ++k) {
    TensorDesc d = (*body_out)[1 + ls.carried + k];
    if (!d.IsUnknownRank()) d.dims.insert(d.dims.begin(), trips);
    c->out[ls.carried + k] = d;
  }
  return true;
}

bool AllInputsKnown(const InferCtx &c) { return FirstUnknownInput(c, nullptr) < 0; }

bool InferLoop(InferCtx *c, std::string *reason) {
  Subgraph body;
  LoopShape ls;
  if (!LoopBody(*c->node, &body, &ls, reason)) return false;
  if (c->has(0) && (c->in[0]->dtype != ElemType::kInt64 || (c->in[0]->IsStatic() && c->in[0]->NumElements() != 1))) {
    *reason = "input 'M' must be an int64 tensor of one element, got " + DescStr(*c->in[0]);
    return false;
  }
  if (c->has(1) && (c->in[1]->dtype != ElemType::kBool || (c->in[1]->IsStatic() && c->in[1]->NumElements() != 1))) {
    *reason = "input 'cond' must be a bool tensor of one element, got " + DescStr(*c->in[1]);
    return false;
  }
  if (!c->has(0) && ConditionPassesThrough(*body.g) && !(c->has(1) && c->in_data[1] &&
                                                         !*static_cast<const uint8_t *>(c->in_data[1]))) {
    *reason = "the loop never ends: it has no trip count 'M' and its body passes its condition through unchanged";
    return false;
  }
  std::vector<TensorDesc> body_out;
  if (InferLoopStatically(c, body, ls, &body_out)) return true;
  // The shapes depend on values: run the loop once every input is known.
  if (!AllInputsKnown(*c)) {
    if (!c->need_static) {  // shape inference only: what is known, -1 for the rest
      if (body_out.size() != body.outputs()) {
        *reason = "the output shapes could not be inferred from subgraph 'body'";
        return false;
      }
      for (size_t o = 0; o < c->out.size(); ++o) {
        c->out[o] = o < ls.carried ? MergeDescs(*c->in[2 + o], body_out[1 + o]) : body_out[1 + o];
        if (o >= ls.carried) c->out[o].dims.insert(c->out[o].dims.begin(), -1);
      }
      return true;
    }
    c->missing_input = FirstUnknownInput(*c, nullptr);
    *reason = "the loop's output shapes depend on the values of its inputs (trip count, condition or loop-carried "
              "values), and input '" + c->node->input_names[c->missing_input] + "' is not a compile-time constant";
    return false;
  }
  std::vector<TensorDesc> templates(ls.scans);
  for (size_t k = 0; k < ls.scans && body_out.size() == body.outputs(); ++k) templates[k] = body_out[1 + ls.carried + k];
  LoopRunner runner(body, ls, c->memory_limit);
  std::vector<HostTensor> outs;
  if (!runner.Run(c->in, c->in_data.data(), templates, &outs, reason)) return false;
  for (size_t o = 0; o < outs.size(); ++o) c->out[o] = outs[o].desc;
  return true;
}

class LoopKernel : public ControlKernel {
 public:
  LoopKernel(const KernelCtx &c, Subgraph body, LoopShape ls)
      : ControlKernel(c), loop_(std::move(body), ls, c.memory_limit) {
    for (size_t k = 0; k < ls.scans; ++k) {
      TensorDesc d = c.out[ls.carried + k];
      d.dims.erase(d.dims.begin());
      templates_.push_back(d);
    }
  }
  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    if (!loop_.Run(in_, in, templates_, &outs_, reason)) return false;
    return DeliverOutputs(outs_, out_, out, "loop", reason);
  }

 private:
  LoopRunner loop_;
  std::vector<TensorDesc> templates_;
  std::vector<HostTensor> outs_;
};

std::unique_ptr<Kernel> PrepareLoop(const KernelCtx &c, std::string *reason) {
  Subgraph body;
  LoopShape ls;
  if (!LoopBody(*c.node, &body, &ls, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new LoopKernel(c, std::move(body), ls));
}

std::unique_ptr<Kernel> PrepareIf(const KernelCtx &c, std::string *reason) {
  Subgraph then_g, else_g;
  if (!IfBranches(*c.node, &then_g, &else_g, reason)) return nullptr;
  return std::unique_ptr<Kernel>(new IfKernel(c, std::move(then_g), std::move(else_g)));
}

// ---- Scan ----

struct ScanSpec {
  bool v8 = false;  // opset 8: input 0 is sequence_lens, every other input and output has a leading batch axis
  size_t first = 0;  // node input index of the first state
  size_t states = 0, scan_in = 0, scan_out = 0;
  std::vector<int64_t> in_axes, in_dirs, out_axes, out_dirs;  // per scan input / output
};

// An ints attribute of n entries (default all zero), each in [lo, hi].
bool ScanInts(const Node &n, const char *name, size_t count, int64_t lo, int64_t hi, std::vector<int64_t> *v,
              std::string *reason) {
  bool present = false;
  if (!AttrInts(n, name, v, &present, reason)) return false;
  if (!present) v->assign(count, 0);
  if (v->size() != count) {
    *reason = "attribute '" + std::string(name) + "' must have " + std::to_string(count) + " entries, it has " +
              std::to_string(v->size());
    return false;
  }
  for (int64_t x : *v)
    if (x < lo || x > hi) {
      *reason = "attribute '" + std::string(name) + "' holds " + std::to_string(x) + ", outside [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]";
      return false;
    }
  return true;
}

bool ScanBody(const Node &n, int64_t opset, Subgraph *body, ScanSpec *sp, std::string *reason) {
  if (!FindSubgraph(n, "body", body, reason)) return false;
  int64_t m;
  if (!AttrInt(n, "num_scan_inputs", -1, &m, reason)) return false;
  sp->v8 = opset < 9;
  sp->first = sp->v8 ? 1 : 0;
  const size_t explicit_in = ExplicitInputs(n);
  if (m < 1 || static_cast<size_t>(m) + sp->first > explicit_in) {
    *reason = "attribute 'num_scan_inputs' must be in [1, " + std::to_string(explicit_in - sp->first) + "], got " +
              std::to_string(m);
    return false;
  }
  if (!RequirePresent(n, sp->first, reason)) return false;
  sp->scan_in = static_cast<size_t>(m);
  sp->states = explicit_in - sp->first - sp->scan_in;
  if (n.output_names.size() < sp->states) {
    *reason = "has " + std::to_string(sp->states) + " state inputs but only " + std::to_string(n.output_names.size()) +
              " outputs";
    return false;
  }
  sp->scan_out = n.output_names.size() - sp->states;
  if (body->declared != sp->states + sp->scan_in || body->outputs() != sp->states + sp->scan_out) {
    *reason = "subgraph 'body' must have " + std::to_string(sp->states + sp->scan_in) + " inputs and " +
              std::to_string(sp->states + sp->scan_out) + " outputs (states then scan elements), it has " +
              std::to_string(body->declared) + " and " + std::to_string(body->outputs());
    return false;
  }
  if (sp->v8) {
    sp->in_axes.assign(sp->scan_in, 0);
    sp->out_axes.assign(sp->scan_out, 0);
    sp->out_dirs.assign(sp->scan_out, 0);
    return ScanInts(n, "directions", sp->scan_in, 0, 1, &sp->in_dirs, reason);
  }
  return ScanInts(n, "scan_input_directions", sp->scan_in, 0, 1, &sp->in_dirs, reason) &&
         ScanInts(n, "scan_output_directions", sp->scan_out, 0, 1, &sp->out_dirs, reason) &&
         ScanInts(n, "scan_input_axes", sp->scan_in, -int64_t(kMaxRank), int64_t(kMaxRank), &sp->in_axes, reason) &&
         ScanInts(n, "scan_output_axes", sp->scan_out, -int64_t(kMaxRank), int64_t(kMaxRank), &sp->out_axes,
                  reason);
}

bool CheckScan(const Node &n, int64_t opset, std::string *reason) {
  Subgraph body;
  ScanSpec sp;
  return ScanBody(n, opset, &body, &sp, reason);
}

// A tensor seen per batch row (opset 8; one row otherwise): dims without the batch axis, sequence axis `axis`.
struct ScanView {
  std::vector<int64_t> dims;
  size_t axis = 0;
  size_t row_bytes = 0;
};

// Scan input j's per-row view; false + reason for a bad rank or axis.
bool ScanInputView(const ScanSpec &sp, size_t j, const TensorDesc &d, ScanView *v, std::string *reason) {
  std::vector<int64_t> dims = d.dims;
  if (sp.v8) {
    if (dims.size() < 2) {
      *reason = "scan input " + std::to_string(j) + " must have a batch and a sequence axis, got " + DescStr(d);
      return false;
    }
    dims.erase(dims.begin());
  }
  int64_t axis;
  if (!NormalizeAxis(sp.in_axes[j], static_cast<int64_t>(dims.size()), false, &axis, reason)) return false;
  v->dims = dims;
  v->axis = static_cast<size_t>(axis);
  return true;
}

struct ScanShapes {
  int64_t batch = 1, length = -1;
  std::vector<ScanView> in_views;
  std::vector<TensorDesc> body_in;  // states and scan elements (per row), then captures
};

bool ScanShapesOf(const std::vector<const TensorDesc *> &in, const ScanSpec &sp, const Subgraph &body, ScanShapes *ss,
                  std::string *reason) {
  ss->in_views.resize(sp.scan_in);
  ss->body_in.clear();
  if (sp.v8) ss->batch = in[sp.first]->dims.empty() ? -1 : in[sp.first]->dims[0];
  for (size_t i = 0; i < sp.states; ++i) {
    TensorDesc d = *in[sp.first + i];
    if (sp.v8 && d.dims.empty()) {
      *reason = "state input " + std::to_string(i) + " must have a batch axis, got " + DescStr(d);
      return false;
    }
    if (sp.v8) d.dims.erase(d.dims.begin());
    ss->body_in.push_back(d);
  }
  for (size_t j = 0; j < sp.scan_in; ++j) {
    const TensorDesc &d = *in[sp.first + sp.states + j];
    ScanView &v = ss->in_views[j];
    if (!ScanInputView(sp, j, d, &v, reason)) return false;
    const int64_t len = v.dims[v.axis];
    if (len >= 0 && ss->length >= 0 && len != ss->length) {
      *reason = "scan inputs disagree on the sequence length: " + std::to_string(ss->length) + " and " +
                std::to_string(len);
      return false;
    }
    if (len >= 0) ss->length = len;
    TensorDesc e{d.dtype, v.dims};
    e.dims.erase(e.dims.begin() + v.axis);
    ss->body_in.push_back(e);
  }
  for (size_t i : body.capture_input) ss->body_in.push_back(*in[i]);
  for (size_t i = sp.first; sp.v8 && i < sp.first + sp.states + sp.scan_in; ++i) {
    const int64_t b = in[i]->dims.empty() ? -1 : in[i]->dims[0];
    if (b >= 0 && ss->batch >= 0 && b != ss->batch) {
      *reason = "inputs disagree on the batch size: " + std::to_string(ss->batch) + " and " + std::to_string(b);
      return false;
    }
  }
  return true;
}

// Scan output k's shape from its per-iteration desc e.
bool ScanOutputDesc(const ScanSpec &sp, const ScanShapes &ss, size_t k, const TensorDesc &e, TensorDesc *out,
                    std::string *reason) {
  *out = e;
  if (e.IsUnknownRank()) return true;
  int64_t axis;  // counted in the output's rank, which has the scan axis
  if (!NormalizeAxis(sp.out_axes[k], static_cast<int64_t>(e.dims.size()) + 1, false, &axis, reason)) return false;
  out->dims.insert(out->dims.begin() + axis, ss.length);
  if (sp.v8) out->dims.insert(out->dims.begin(), ss.batch);
  return true;
}

bool InferScan(InferCtx *c, std::string *reason) {
  Subgraph body;
  ScanSpec sp;
  if (!ScanBody(*c->node, c->opset, &body, &sp, reason)) return false;
  ScanShapes ss;
  if (!ScanShapesOf(c->in, sp, body, &ss, reason)) return false;
  std::vector<const void *> data(body.declared, nullptr);
  for (size_t i : body.capture_input) data.push_back(c->in_data[i]);
  std::vector<TensorDesc> body_out;
  std::vector<char> needed;
  if (!InferSubgraph(body, ss.body_in, data, c->need_static, &body_out, &needed, reason)) {
    const std::vector<char> marked = NodeInputsNeeded(body, needed, c->in.size());
    for (size_t i = 0; i < marked.size(); ++i)
      if (marked[i] && !c->in_data[i]) c->missing_input = static_cast<int>(i);
    return false;
  }
  for (size_t i = 0; i < sp.states; ++i) {
    if (!SameDesc(body_out[i], ss.body_in[i]) && (c->need_static || body_out[i].dtype != ss.body_in[i].dtype)) {
      *reason = "subgraph 'body' turns state " + std::to_string(i) + " of " + DescStr(ss.body_in[i]) + " into " +
                DescStr(body_out[i]) + "; a Scan state must keep its type and shape";
      return false;
    }
    c->out[i] = *c->in[sp.first + i];
  }
  for (size_t k = 0; k < sp.scan_out; ++k)
    if (!ScanOutputDesc(sp, ss, k, body_out[sp.states + k], &c->out[sp.states + k], reason)) return false;
  return true;
}

// Copies slice `index` along v.axis between a row (dims v.dims) and a dense slice buffer.
void CopySlice(const ScanView &v, size_t esize, int64_t index, uint8_t *row, uint8_t *slice, bool to_slice) {
  size_t outer = 1, inner = esize;
  for (size_t d = 0; d < v.axis; ++d) outer *= static_cast<size_t>(v.dims[d]);
  for (size_t d = v.axis + 1; d < v.dims.size(); ++d) inner *= static_cast<size_t>(v.dims[d]);
  const size_t len = static_cast<size_t>(v.dims[v.axis]);
  for (size_t o = 0; o < outer; ++o) {
    uint8_t *r = row + (o * len + static_cast<size_t>(index)) * inner;
    if (to_slice)
      CopyBytes(slice + o * inner, r, inner);
    else
      CopyBytes(r, slice + o * inner, inner);
  }
}

size_t RowBytes(const TensorDesc &d, bool batched) {
  return batched && !d.dims.empty() && d.dims[0] > 0 ? d.Bytes() / static_cast<size_t>(d.dims[0]) : d.Bytes();
}

class ScanKernel : public ControlKernel {
 public:
  ScanKernel(const KernelCtx &c, Subgraph body, ScanSpec sp, ScanShapes ss)
      : ControlKernel(c), runner_(std::move(body), c.memory_limit), sp_(std::move(sp)), ss_(std::move(ss)) {
    for (size_t k = 0; k < sp_.scan_out; ++k) {
      ScanView v;
      v.dims = out_[sp_.states + k].dims;
      if (sp_.v8) v.dims.erase(v.dims.begin());
      int64_t axis = 0;
      std::string ignored;
      NormalizeAxis(sp_.out_axes[k], static_cast<int64_t>(v.dims.size()), false, &axis, &ignored);
      v.axis = static_cast<size_t>(axis);
      TensorDesc e{out_[sp_.states + k].dtype, v.dims};
      e.dims.erase(e.dims.begin() + v.axis);
      out_views_.push_back(v);
      elem_descs_.push_back(e);
    }
    slices_.resize(sp_.scan_in);
    for (size_t j = 0; j < sp_.scan_in; ++j) slices_[j].resize(ss_.body_in[sp_.states + j].Bytes());
  }

  bool Run(const void *const *in, void *const *out, std::string *reason) override {
    if (sp_.v8 && in_[0] && !CheckSequenceLens(in[0], reason)) return false;
    for (int64_t b = 0; b < ss_.batch; ++b)
      if (!RunRow(b, in, out, reason)) return false;
    return true;
  }

 private:
  bool CheckSequenceLens(const void *p, std::string *reason) {
    std::vector<int64_t> lens(static_cast<size_t>(in_[0]->NumElements()));
    if (in_[0]->dtype == ElemType::kInt64) {
      CopyBytes(lens.data(), p, lens.size() * 8);
    } else if (in_[0]->dtype == ElemType::kInt32) {
      for (size_t i = 0; i < lens.size(); ++i) lens[i] = static_cast<const int32_t *>(p)[i];
    }
    for (int64_t len : lens)
      if (len != ss_.length) {
        *reason = "input 'sequence_lens' holds " + std::to_string(len) + "; the twin supports only sequences of "
                  "the full length " + std::to_string(ss_.length);
        return false;
      }
    return true;
  }

  bool RunRow(int64_t b, const void *const *in, void *const *out, std::string *reason) {
    state_.resize(sp_.states);
    for (size_t i = 0; i < sp_.states; ++i) {
      const size_t n = RowBytes(*in_[sp_.first + i], sp_.v8);
      const uint8_t *p = static_cast<const uint8_t *>(in[sp_.first + i]) + b * n;
      state_[i].desc = ss_.body_in[i];
      state_[i].bytes.assign(p, p + n);
    }
    for (int64_t t = 0; t < ss_.length; ++t) {
      descs_.clear();
      ptrs_.clear();
      for (const HostTensor &s : state_) {
        descs_.push_back(s.desc);
        ptrs_.push_back(s.data());
      }
      for (size_t j = 0; j < sp_.scan_in; ++j) {
        const size_t in_i = sp_.first + sp_.states + j;
        const size_t n = RowBytes(*in_[in_i], sp_.v8);
        uint8_t *row = static_cast<uint8_t *>(const_cast<void *>(in[in_i])) + b * n;
        const int64_t index = sp_.in_dirs[j] ? ss_.length - 1 - t : t;
        CopySlice(ss_.in_views[j], ElemSize(in_[in_i]->dtype), index, row, slices_[j].data(), true);
        descs_.push_back(ss_.body_in[sp_.states + j]);
        ptrs_.push_back(slices_[j].empty() ? EmptyTensorData() : slices_[j].data());
      }
      for (size_t i : runner_.subgraph().capture_input) {
        descs_.push_back(*in_[i]);
        ptrs_.push_back(in[i]);
      }
      if (!runner_.Run(descs_, ptrs_, &body_out_, reason)) return false;
      if (!TakeOutputs(b, t, out, reason)) return false;
    }
    for (size_t i = 0; i < sp_.states; ++i) {
      const size_t n = RowBytes(out_[i], sp_.v8);
      CopyBytes(static_cast<uint8_t *>(out[i]) + b * n, state_[i].data(), n);
    }
    return true;
  }

  bool TakeOutputs(int64_t b, int64_t t, void *const *out, std::string *reason) {
    for (size_t i = 0; i < sp_.states; ++i) {
      if (!SameDesc(body_out_[i].desc, state_[i].desc)) {
        *reason = "subgraph 'body' turned state " + std::to_string(i) + " into " + DescStr(body_out_[i].desc) +
                  " at iteration " + std::to_string(t);
        return false;
      }
      std::swap(state_[i], body_out_[i]);
    }
    for (size_t k = 0; k < sp_.scan_out; ++k) {
      HostTensor &e = body_out_[sp_.states + k];
      if (!SameDesc(e.desc, elem_descs_[k])) {
        *reason = "subgraph 'body' scan output " + std::to_string(k) + " is " + DescStr(e.desc) + " at iteration " +
                  std::to_string(t) + ", but " + DescStr(elem_descs_[k]) + " was inferred";
        return false;
      }
      const size_t n = RowBytes(out_[sp_.states + k], sp_.v8);
      uint8_t *row = static_cast<uint8_t *>(out[sp_.states + k]) + b * n;
      const int64_t index = sp_.out_dirs[k] ? ss_.length - 1 - t : t;
      CopySlice(out_views_[k], ElemSize(e.desc.dtype), index, row, e.bytes.data(), false);
    }
    return true;
  }

  SubgraphRunner runner_;
  ScanSpec sp_;
  ScanShapes ss_;
  std::vector<ScanView> out_views_;
  std::vector<TensorDesc> elem_descs_;
  std::vector<std::vector<uint8_t>> slices_;
  std::vector<HostTensor> state_, body_out_;
  std::vector<TensorDesc> descs_;
  std::vector<const void *> ptrs_;
};

std::unique_ptr<Kernel> PrepareScan(const KernelCtx &c, std::string *reason) {
  Subgraph body;
  ScanSpec sp;
  ScanShapes ss;
  if (!ScanBody(*c.node, c.opset, &body, &sp, reason) || !ScanShapesOf(c.in, sp, body, &ss, reason)) return nullptr;
  if (ss.length < 0 || ss.batch < 0) {
    *reason = "the sequence length is not known";
    return nullptr;
  }
  return std::unique_ptr<Kernel>(new ScanKernel(c, std::move(body), std::move(sp), std::move(ss)));
}

}  // namespace

void RegisterControlOps(std::vector<OpDef> *ops) {
  ops->push_back({"If", 1, 1, 1, 1 << 20, CheckIf, InferIf, PrepareIf, true});
  ops->push_back({"Loop", 0, 1 << 20, 1, 1 << 20, CheckLoop, InferLoop, PrepareLoop, true});
  ops->push_back({"Scan", 0, 1 << 20, 1, 1 << 20, CheckScan, InferScan, PrepareScan, true});
}

}  // namespace onnx
}  // namespace twin
