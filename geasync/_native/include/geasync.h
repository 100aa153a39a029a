/* geasync.h: the plain C ABI of the geasync shim over GE v2 / ACL (the twin or a real CANN install).
 * Opaque handles, POD tensor descriptors and uint32_t statuses only, so cffi (API mode) can bind it.
 * The same declarations are read by cffi's cdef: keep everything between the CDEF markers free of
 * preprocessor directives.
 *
 * Ownership: the shim owns native memory. A ga_tensor owns its data until ga_tensor_destroy; a ga_outputs
 * owns the tensors not yet taken. Errors: every failing call stores a message for the calling thread,
 * read with ga_last_error() / ga_last_api() before the next ga_* call on that thread. */
#ifndef GEASYNC_GEASYNC_H_
#define GEASYNC_GEASYNC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */
typedef uint32_t ga_status;

typedef struct ga_session ga_session;
typedef struct ga_graph ga_graph;
typedef struct ga_tensor ga_tensor;
typedef struct ga_outputs ga_outputs;
typedef struct ga_completion_queue ga_completion_queue;

/* Where a tensor's memory is (ga_tensor_desc.placement, ga_output_info.placement). */
enum ga_placement { GA_PLACEMENT_DEVICE = 0, GA_PLACEMENT_HOST = 1 };

/* What a completion record reports (ga_completion.kind). */
enum ga_completion_kind {
  GA_COMPLETION_RUN = 0,       /* RunGraphAsync callback: status = GE's callback status, outputs on success */
  GA_COMPLETION_HOST_FUNC = 1, /* a host function on a stream was reached (status 0) */
  GA_COMPLETION_ABANDONED = 2, /* the runtime dropped the job without a callback (session destroyed, GE finalised) */
  GA_COMPLETION_REFUSED = 3    /* RunGraphAsync returned an error when the job was submitted in a batch */
};

/* ga_memcpy's direction (aclrtMemcpyKind's values). */
enum ga_memcpy_kind {
  GA_MEMCPY_HOST_TO_HOST = 0,
  GA_MEMCPY_HOST_TO_DEVICE = 1,
  GA_MEMCPY_DEVICE_TO_HOST = 2,
  GA_MEMCPY_DEVICE_TO_DEVICE = 3
};

/* Borrowed view of a tensor: the memory at data stays owned by the caller (inputs) or the ga_tensor (outputs).
 * dtype uses ge::DataType numbering; placement is a ga_placement. */
typedef struct ga_tensor_desc {
  void *data;
  size_t size;
  int32_t dtype;
  int32_t placement;
  uint32_t ndim;
  int64_t dims[25];
} ga_tensor_desc;

/* An output the caller takes over (ga_outputs_take_all): its handle, to destroy with ga_tensor_destroy (or
 * ga_output_infos_release), and its description, with the data address both as an integer (one field read per value
 * on the binding's hot path) and as a pointer (the source of a copy, without a cast). `layout` names the description
 * (size, dtype, placement, ndim, dims): outputs described alike get the same nonzero id for the life of the process,
 * so a binding can keep what it derives from one instead of reading every field of every output; 0 when the
 * process has seen too many different layouts to name another (GA_MAX_OUTPUT_LAYOUTS). */
typedef struct ga_output_info {
  ga_tensor *handle;
  const void *data;
  uintptr_t address;
  size_t size;
  int32_t dtype;
  int32_t placement;
  uint32_t ndim;
  uint32_t layout;
  int64_t dims[25];
} ga_output_info;

/* How many output layouts get an id (ga_output_info.layout). */
#define GA_MAX_OUTPUT_LAYOUTS 16384

/* String maps (GE options) as parallel arrays. */
typedef struct ga_options {
  const char *const *keys;
  const char *const *values;
  size_t count;
} ga_options;

typedef struct ga_graph_summary {
  int32_t is_static;
  size_t const_memory_size;
  size_t feature_memory_size;
  size_t stream_num;
  size_t event_num;
  size_t output_count;
} ga_graph_summary;

/* A finished piece of asynchronous work, drained from a completion queue on the consumer's thread; kind is a
 * ga_completion_kind. */
typedef struct ga_completion {
  uint64_t token;
  ga_status status;
  int32_t kind;
  ga_outputs *outputs;
  char *error_message;
  int32_t output_count; /* set by ga_cq_drain_outputs (see there) */
} ga_completion;

/* One RunGraphAsync request of a batch (ga_run_graph_async_batch). */
typedef struct ga_async_submit {
  ga_session *session;
  uint32_t graph_id;
  const ga_tensor_desc *inputs;
  size_t input_count;
  uint64_t token;
} ga_async_submit;

typedef struct ga_live_counters {
  int64_t sessions;
  int64_t graphs;
  int64_t tensors;
  int64_t outputs_lists;
  int64_t streams;
  int64_t completion_queues;
  int64_t pending_completions;
  int64_t allocators;
} ga_live_counters;

/* External allocator bridge: called only on the thread that is inside a ga_* call (never on a runtime thread). */
typedef void *(*ga_alloc_malloc_fn)(void *user, size_t size);
typedef void (*ga_alloc_free_fn)(void *user, void *addr);
typedef void (*ga_alloc_release_fn)(void *user);

/* Runtime */
ga_status ga_initialize(const ga_options *options);
ga_status ga_finalize(void);
const char *ga_last_error(void);
const char *ga_last_api(void);
const char *ga_backend_name(void);
/* The geasync version the extension was built for: the package refuses an extension of another version. */
const char *ga_version(void);
void ga_get_live_counters(ga_live_counters *out);

/* Sessions */
ga_status ga_session_create(const ga_options *options, ga_session **out);
void ga_session_destroy(ga_session *session);
uint64_t ga_session_id(const ga_session *session);

/* Graphs */
ga_status ga_graph_parse_onnx(const void *buffer, size_t size, const ga_options *parser_params, ga_graph **out);
void ga_graph_destroy(ga_graph *graph);
ga_status ga_session_add_graph(ga_session *session, uint32_t graph_id, const ga_graph *graph, const ga_options *options);
ga_status ga_session_add_graph_clone(ga_session *session, uint32_t graph_id, const ga_graph *graph,
                                     const ga_options *options);
ga_status ga_session_remove_graph(ga_session *session, uint32_t graph_id);
ga_status ga_session_compile_graph(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                                   size_t input_count, int with_inputs);
ga_status ga_session_load_graph(ga_session *session, uint32_t graph_id, const ga_options *options, void *stream);
int ga_session_is_graph_need_rebuild(ga_session *session, uint32_t graph_id);
ga_status ga_session_get_compiled_graph_summary(ga_session *session, uint32_t graph_id, ga_graph_summary *summary,
                                                ga_tensor_desc *output_descs, size_t output_capacity);

/* Runs. Inputs are borrowed: for run_graph until return, for the stream mode until the stream has passed the run,
 * for run_graph_async until its completion is drained.
 * run_graph waits for any other thread's run_graph (GE fails concurrent RunGraph calls) and hands its outputs over
 * in one call: *output_count is their number; when it is at most `capacity` they are described in infos[] (each
 * handle the caller's, to ga_tensor_destroy), otherwise the whole list is left in *overflow for
 * ga_outputs_take_all. */
ga_status ga_session_run_graph(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                               size_t input_count, ga_output_info *infos, size_t capacity, size_t *output_count,
                               ga_outputs **overflow);
ga_status ga_session_run_graph_with_stream_async(ga_session *session, uint32_t graph_id, void *stream,
                                                 const ga_tensor_desc *inputs, size_t input_count,
                                                 ga_outputs **outputs);
/* RunGraphWithStreamAsync followed, on the same stream, by a host function that completes `token` on `queue`
 * (GA_COMPLETION_HOST_FUNC) once the stream has passed the run, in one call: a run is never left without the signal that frees its inputs. If the host function cannot be launched, the stream is synchronised before the failure is
 * returned (the run no longer uses the inputs then) and the run's outputs are destroyed. */
ga_status ga_session_run_graph_with_stream_completion(ga_session *session, uint32_t graph_id, void *stream,
                                                      const ga_tensor_desc *inputs, size_t input_count,
                                                      ga_outputs **outputs, ga_completion_queue *queue,
                                                      uint64_t token);
ga_status ga_session_run_graph_async(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                                     size_t input_count, ga_completion_queue *queue, uint64_t token);
/* Submits several requests in one call (one GIL release, one wake-up of GE's threads for the lot). A request GE
 * refuses completes at once on `queue` as kind 3 with GE's status and message. Returns how many were refused. */
size_t ga_run_graph_async_batch(const ga_async_submit *items, size_t count, ga_completion_queue *queue);

/* Allocators (process-wide, keyed by stream, as in GE). */
ga_status ga_session_register_external_allocator(ga_session *session, void *stream, ga_alloc_malloc_fn malloc_fn,
                                                 ga_alloc_free_fn free_fn, ga_alloc_release_fn release_fn,
                                                 void *user);
ga_status ga_session_register_default_allocator(ga_session *session, void *stream);
ga_status ga_session_unregister_external_allocator(ga_session *session, void *stream);

/* Output tensors */
/* Takes every tensor (infos[i]) and destroys the list, returning how many there were; if there are more than
 * `capacity`, takes nothing and returns the count. One call instead of 2 + 2n on a hot path. */
size_t ga_outputs_take_all(ga_outputs *outputs, ga_output_info *infos, size_t capacity);
void ga_outputs_destroy(ga_outputs *outputs);
void ga_tensor_destroy(ga_tensor *tensor);
/* ga_tensor_destroy(tensor); `data` is ignored. The owner of a host output's numpy view is a pointer to the data,
 * collected with functools.partial(ga_tensor_destroy_with_data, tensor): a call into C with no Python frame. */
void ga_tensor_destroy_with_data(ga_tensor *tensor, void *data);
/* Destroys infos[i].handle for each i < count whose handle is not NULL (and sets it NULL): the outputs the caller
 * copied out, or did not get to, in one call. */
void ga_output_infos_release(ga_output_info *infos, size_t count);

/* Completion queue: multi-producer (runtime threads), single consumer; fd becomes readable when records wait. */
ga_status ga_cq_create(ga_completion_queue **out);
int ga_cq_fd(const ga_completion_queue *queue);
/* Moves up to `capacity` waiting records into `out` and re-arms the fd (a record pushed meanwhile signals again),
 * also taking the drained records' outputs, in order, into infos (one call per batch on the loop's hot path).
 * Record i: output_count -1 = no outputs; n >= 0 = its n tensors are the next n infos (the list is
 * destroyed, outputs = NULL); -2 = they did not fit in the infos left, the list stays in outputs. */
size_t ga_cq_drain_outputs(ga_completion_queue *queue, ga_completion *out, size_t capacity, ga_output_info *infos,
                           size_t info_capacity);
size_t ga_cq_pending(const ga_completion_queue *queue);
/* Watches for a record for at most budget_ns (the eventfd is not written meanwhile: the caller is not waiting on
 * it) and returns how many wait; 0 after the budget. The caller drains them (ga_cq_drain_outputs). */
size_t ga_cq_poll(ga_completion_queue *queue, uint64_t budget_ns);
/* Writes the fd unless it is written already: a consumer that polled records but may not drain them (interrupted)
 * hands them back to the fd's reader. */
void ga_cq_signal(ga_completion_queue *queue);
void ga_cq_destroy(ga_completion_queue *queue);
void ga_completion_release(ga_completion *completion);
ga_status ga_stream_launch_completion(void *stream, ga_completion_queue *queue, uint64_t token);

/* Streams and device memory (ACL) */
ga_status ga_stream_create(int32_t device_id, void **out);
ga_status ga_stream_destroy(void *stream);
ga_status ga_stream_synchronize(void *stream, int32_t timeout_ms);
ga_status ga_stream_query(void *stream, int *complete);
ga_status ga_device_malloc(int32_t device_id, size_t size, void **out);
ga_status ga_device_free(void *ptr);
ga_status ga_memcpy(void *dst, size_t dst_max, const void *src, size_t count, int32_t kind);

/* Benchmark-only: RunGraphAsync driven natively, no Python in the loop (the limit for the event-loop layer). */
ga_status ga_bench_native_run_graph_async(ga_session *session, uint32_t graph_id, const ga_tensor_desc *inputs,
                                          size_t input_count, uint64_t runs, uint32_t in_flight, uint64_t *elapsed_ns);
/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* GEASYNC_GEASYNC_H_ */
