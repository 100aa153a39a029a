// Twin of GE's graph/graph.h: a ge::Graph is a handle to a graph built by a parser (here: from ONNX).
// Copies share the same graph, as in GE. The content is private to the twin (twin::GraphAccess).
#ifndef GEASYNC_TWIN_GRAPH_GRAPH_H_
#define GEASYNC_TWIN_GRAPH_GRAPH_H_

#include <memory>
#include <string>

#include "graph/ascend_string.h"
#include "graph/error_codes.h"

namespace twin {
class GraphAccess;
}

namespace ge {
class GraphImpl;

class Graph {
 public:
  Graph() = default;
  explicit Graph(const char *name);
  graphStatus GetName(AscendString &name) const;
  bool IsValid() const;  // true once a parser filled it

 private:
  friend class ::twin::GraphAccess;
  std::shared_ptr<GraphImpl> impl_;
  std::string name_;
};
}  // namespace ge

#endif  // GEASYNC_TWIN_GRAPH_GRAPH_H_
