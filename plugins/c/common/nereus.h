/*
 * Small helpers over the C bindings that wit-bindgen generates from wit/backend.wit (backend.h),
 * shared by the C plugins in plugins/c. The bindings are the API; these only save repetition.
 *
 * Memory ownership in wit-bindgen's C bindings (what the plugins must free, and what they must not):
 *
 *  - Arguments of an EXPORTED function (initialize-*, execute) belong to the plugin: the host copied
 *    them into the sandbox with cabi_realloc (malloc) and nothing frees them afterwards. Free them
 *    with the matching *_free (exports_nereus_backend_lifecycle_list_request_free for execute's
 *    requests, ..._model_info_free, ..._instance_info_free, backend_string_free), or keep them
 *    (e.g. move an input's data buffer into a response) and free them later.
 *  - The `err` string an exported function fills when it returns false is freed by the bindings
 *    after the host has read it (cabi_post_*), with free() when its length is not 0: it must be a
 *    heap copy (backend_string_dup, or nereus_error below), never backend_string_set on a literal.
 *  - Arguments of an IMPORTED (host) function are only borrowed by the call: the plugin still owns
 *    the response it passed to send-response and frees it afterwards (nereus_respond does).
 *  - What an imported function returns (send-*'s `err` string) is the plugin's: free it.
 *  - A zero-length list or string may hold a dangling, non-NULL pointer: the *_free functions
 *    check the length first; check it too before touching the pointer. For the same reason an
 *    empty list the plugin builds must not own an array: it would never be freed.
 *
 * Out of memory: malloc returns NULL once the sandbox's memory cap (sandbox.memory_limit_mb) is
 * reached. nereus_xmalloc then aborts, which traps, and the host fails the request with
 * "exceeded its memory limit of N MiB" and rebuilds the instance; cabi_realloc does the same.
 */
#ifndef NEREUS_C_H
#define NEREUS_C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef nereus_backend_types_request_t nereus_request_t;
typedef nereus_backend_types_tensor_t nereus_tensor_t;
typedef nereus_backend_types_response_t nereus_response_t;
typedef nereus_backend_types_parameter_value_t nereus_value_t;
typedef exports_nereus_backend_lifecycle_list_request_t nereus_requests_t;

/* malloc that aborts (a trap: the host reports the memory limit) instead of returning NULL. */
void *nereus_xmalloc(size_t size);

/* Whether a WIT string equals a C string. */
bool nereus_str_eq(const backend_string_t *s, const char *c);

/* The input named `name`, or NULL. */
nereus_tensor_t *nereus_input(const nereus_request_t *request, const char *name);

/* The request parameter `key`, or NULL. */
const nereus_value_t *nereus_parameter(const nereus_request_t *request, const char *key);

/* Whether the client asked for the output `name`. */
bool nereus_wants(const nereus_request_t *request, const char *name);

/* Triton's name of a datatype ("INT32", "FP32", ...). */
const char *nereus_datatype_name(nereus_backend_types_data_type_t datatype);

/* Bytes of one element of a fixed-size datatype (0 for BYTES). */
size_t nereus_element_size(nereus_backend_types_data_type_t datatype);

/* Elements of a tensor: the product of its shape. */
size_t nereus_elements(const nereus_tensor_t *tensor);

/* Writes a printf-formatted line to the server log at `level` (NEREUS_BACKEND_HOST_LOG_LEVEL_*). */
void nereus_log(nereus_backend_host_log_level_t level, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Fills an exported function's `err` with a heap copy of the formatted message and returns false,
 * so that `return nereus_error(err, "...")` fails the call. */
bool nereus_error(backend_string_t *err, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* Fails request `index` of the batch with `kind` (NEREUS_BACKEND_TYPES_ERROR_KIND_*) and the
 * formatted message. True on success; false, with `err` set from the host's refusal, otherwise. */
bool nereus_fail(uint32_t index, nereus_backend_types_error_kind_t kind, backend_string_t *err, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/* Sets `tensor` to a new output: a copy of `name` and of `shape`, and `bytes` bytes of data
 * (uninitialised, from nereus_xmalloc; NULL when `bytes` is 0) for the caller to fill. */
void nereus_tensor_new(nereus_tensor_t *tensor, const char *name, nereus_backend_types_data_type_t datatype,
                       const int64_t *shape, size_t rank, size_t bytes);

/* Sends `response` as request `index`'s one and final response, then frees it (outputs, their
 * data, parameters and the arrays holding them: all must be heap memory the plugin owns). True on
 * success; false, with `err` set from the host's refusal, otherwise. */
bool nereus_respond(uint32_t index, nereus_response_t *response, backend_string_t *err);

/* Copies the string_value of the model configuration parameter `key` (from model-info's
 * config-json) into `out` (NUL-terminated, at most `cap` bytes with the NUL). Returns 1 when found,
 * 0 when the configuration has no such parameter, -1 when it does not fit or is not a plain string. */
int nereus_config_parameter(const backend_string_t *config_json, const char *key, char *out, size_t cap);

#endif
