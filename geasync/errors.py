"""Exceptions of geasync.

``GeError`` mirrors GE's Python package (``ge.error.GeError``): a ``RuntimeError`` carrying the status code, GE's
own message, the GE/ACL API that failed and the geasync call context. Status codes are translated into these
exceptions in exactly one place (``geasync._lib``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GeError", "ExecutionModeError", "SessionClosedError", "SessionBrokenError", "InputError", "InputTypeError",
           "STATUS_NAMES", "FAILED", "PARAM_INVALID", "INTERNAL_ERROR"]

# GE's main status codes (ge_api_error_codes) and the ACL codes the shim may return.
STATUS_NAMES: dict[int, str] = {
    0: "SUCCESS",
    4294967295: "FAILED",
    1343225856: "MEMALLOC_FAILED",
    1343225857: "PARAM_INVALID",
    1343225859: "RT_FAILED",
    1343225860: "INTERNAL_ERROR",
    1343225863: "END_OF_SEQUENCE",
    1343225956: "UNSUPPORTED",
    1343229963: "GE_CLI_GE_NOT_INITIALIZED",
    1343238145: "GE_SESS_ALREADY_RUNNING",
    1343242241: "GE_GRAPH_ALREADY_RUNNING",
    1343242242: "GE_GRAPH_GRAPH_NOT_EXIST",
    1343242272: "GE_GRAPH_SYNC_MODEL_FAILED",
    1343242281: "GE_GRAPH_UNSUPPORTED",
    1343242295: "GE_GRAPH_NOT_BUILT",
    1343242306: "GE_GRAPH_REPEAT_OPERATION",
    50331649: "GRAPH_PARAM_INVALID",
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    200000: "ACL_ERROR_BAD_ALLOC",
    107002: "ACL_ERROR_RT_CONTEXT_NULL",
    107003: "ACL_ERROR_RT_STREAM_CONTEXT",
    500003: "ACL_ERROR_RT_FAILURE",
    507046: "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
}


class GeError(RuntimeError):
    """A GE / ACL call failed.

    Attributes:
        status: the GE ``Status`` (or ``aclError``) returned by the runtime.
        error_message: GE's own error text for the failure (read on the thread that saw it).
        api_name: the GE/ACL API that failed, e.g. ``"GeSession::RunGraph"``.
        context: what geasync was doing, e.g. ``"Session.run_graph(graph_id=1)"``.
    """

    def __init__(self, status: int, error_message: str, api_name: str, context: str = "") -> None:
        self.status = int(status)
        self.error_message = error_message
        self.api_name = api_name
        self.context = context
        super().__init__(self._format())

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, "UNKNOWN")

    def _format(self) -> str:
        head = f"{self.api_name} failed with status {self.status} ({self.status_name})"
        if self.context:
            head += f" in {self.context}"
        return f"{head}: {self.error_message}" if self.error_message else head

    def __reduce__(self) -> tuple[Any, ...]:  # keep picklable for multiprocessing / pytest-xdist
        return (type(self), (self.status, self.error_message, self.api_name, self.context))


class ExecutionModeError(GeError):
    """A graph was run in a mode other than the one its first run fixed (GE's per-graph run-mode exclusivity)."""


class SessionClosedError(GeError):
    """The session (or stream) was closed; create a new one."""


class SessionBrokenError(GeError):
    """The runtime will never complete this request (session closed, GE finalised, async queue stopped).

    Create a new Session; requests already in flight on the old one have been released.
    """


# Statuses geasync reports itself, named as GE names them (ge_api_error_codes.h and GE's internal codes)
FAILED = 0xFFFFFFFF  # ge::FAILED: what GE returns for most refusals, and geasync for a closed session or stream
PARAM_INVALID = 1343225857
INTERNAL_ERROR = 1343225860


class InputError(GeError, ValueError):
    """A run's inputs do not match the graph's declared inputs (count, names, dtype, rank or a fixed dim).

    Raised before the request reaches the runtime, so it never affects the session or other requests: a service
    can answer it as a bad request (``except ga.InputError``) and keep going. It is a ``ValueError`` and, for
    compatibility with what the runtime itself reports, a ``GeError`` (status PARAM_INVALID).

    Attributes, beyond GeError's: ``graph_id``, ``input_index`` and ``input_name`` (None when the problem is not one
    input's, e.g. a wrong count).
    """

    def __init__(self, status: int, error_message: str, api_name: str, context: str = "", *,
                 graph_id: int | None = None, input_index: int | None = None,
                 input_name: str | None = None) -> None:
        self.graph_id = graph_id
        self.input_index = input_index
        self.input_name = input_name
        super().__init__(status, error_message, api_name, context)

    def _format(self) -> str:
        return f"{self.context}: {self.error_message}" if self.context else self.error_message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_input_error, (type(self), self.status, self.error_message, self.api_name, self.context,
                                       self.graph_id, self.input_index, self.input_name))


class InputTypeError(InputError, TypeError):
    """An input's dtype is not the one the graph declares (also a ``TypeError``)."""


def _rebuild_input_error(cls: type[InputError], status: int, error_message: str, api_name: str, context: str,
                         graph_id: int | None, input_index: int | None, input_name: str | None) -> InputError:
    return cls(status, error_message, api_name, context, graph_id=graph_id, input_index=input_index,
               input_name=input_name)
