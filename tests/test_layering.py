"""The package's layering, checked from its source: geasync's modules import each other without a cycle (imports
inside functions included, since they are cycles all the same), no module imports one of a layer above its own,
and only ``geasync._lib`` reaches the native extensions. See docs/architecture.md for the layers."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "geasync"
NATIVE_MODULES = {"geasync._twin", "geasync._cann"}
FFI_OWNER = "geasync._lib"


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Every geasync module ``path`` imports, wherever the import statement is."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("geasync"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("geasync"):
                continue
            submodules = {f"{target}.{a.name}" for a in node.names
                          if (PACKAGE.parent / f"{target}.{a.name}".replace(".", "/")).with_suffix(".py").exists()}
            # `from . import _lib` imports the submodule; `from .errors import GeError` the module itself
            found.update(submodules if submodules and node.module is None else {target} | submodules)
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        # the package itself only re-exports: an edge to it from a submodule is a cycle through __init__
        graph[name] = {m for m in _imports(path) if m in modules or m in NATIVE_MODULES}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    # the package root is a node too: a module that __init__ imports must not import the root back (entry points
    # such as __main__ or the pytest plugin, which __init__ does not import, may)
    assert not _cycles(_graph()), f"import cycles: {_cycles(_graph())}"


def test_only_lib_touches_the_native_extensions():
    graph = _graph()
    users = sorted(m for m, deps in graph.items() if deps & NATIVE_MODULES)
    assert users in ([], [FFI_OWNER]), f"modules importing the native extensions directly: {users}"


def test_lib_is_the_bottom_layer():
    """The ffi chokepoint depends on nothing above it (errors, the library preloader and the optional dtypes only)."""
    allowed = {"geasync.errors", "geasync._preload", "geasync._version", "geasync._dtypes"}
    assert _graph()[FFI_OWNER] <= allowed | NATIVE_MODULES, _graph()[FFI_OWNER]


# Bottom to top (docs/architecture.md). A module may import modules of its own layer or below, never above.
LAYERS: list[set[str]] = [
    # foundations: no geasync imports but each other's (_metadata reads _dtypes)
    {"errors", "_version", "_preload", "_dtypes", "_metadata", "_options", "_stats", "_external_data", "_toolkit",
     "_loops", "_cffi_build"},
    {"_lib"},  # the ffi chokepoint
    # native values and what describes them
    {"_inputs", "tensor", "graph", "allocator", "_faults", "samples", "_check"},
    # lifetimes: pins and bounds, completion hubs, stream runs, leak diagnostics
    {"_modes", "_pins", "_inflight", "_hub", "_streams", "_diagnostics"},
    {"stream", "_types", "session"},  # the public core (and the type aliases of what it accepts)
    {"pool", "batcher", "twin", "prometheus", "serve"},  # built on sessions
    {"geasync", "__main__", "pytest_plugin"},  # the package and its entry points
]


def _layer_of() -> dict[str, int]:
    return {("geasync" if name == "geasync" else f"geasync.{name}"): level
            for level, names in enumerate(LAYERS) for name in names}


def test_every_module_has_a_layer():
    missing = sorted(set(_graph()) - set(_layer_of()))
    assert not missing, f"modules with no layer in LAYERS (add them where they belong): {missing}"


def test_no_module_imports_a_layer_above_its_own():
    layer = _layer_of()
    upward = sorted((m, d) for m, deps in _graph().items() for d in deps
                    if d in layer and m in layer and layer[d] > layer[m])
    assert not upward, f"upward imports: {upward}"
