/*
 * moving_average_c: a numeric kernel over FP32. OUTPUT0 has INPUT0's shape; along the last axis,
 * each element is the mean of the `window` elements ending at it (fewer at the start of a row):
 *
 *     OUTPUT0[..., i] = mean(INPUT0[..., max(0, i - window + 1) ..= i])
 *
 * `window` is the model configuration parameter "window" (a positive integer, default 3), which a
 * request may override with its own parameter "window" (an integer >= 1). Each response carries
 * the parameters "window" (the one used) and "batch_size" (requests in the execute call that
 * answered it). A request whose "window" is not a positive integer fails alone (invalid-argument);
 * the others of its batch are answered. A request nobody waits for any more is not computed.
 *
 * Sums are kept in double precision: each output is within float rounding of the exact mean.
 *
 * Ownership (see ../common/nereus.h): the model info and the requests are ours and freed here; the
 * responses are heap memory freed by nereus_respond once sent.
 */
#include <stdlib.h>
#include <string.h>

#include "nereus.h"

static int64_t model_window = 3;

bool exports_nereus_backend_lifecycle_initialize_model(exports_nereus_backend_lifecycle_model_info_t *model,
                                                       backend_string_t *err) {
    char text[32];
    bool ok = true;
    switch (nereus_config_parameter(&model->config_json, "window", text, sizeof text)) {
    case 1: {
        char *end;
        long long w = strtoll(text, &end, 10);
        if (end == text || *end || w < 1) {
            ok = nereus_error(err, "moving_average_c: the model parameter 'window' must be a positive integer, got '%s'",
                              text);
        } else {
            model_window = w;
        }
        break;
    }
    case -1:
        ok = nereus_error(err, "moving_average_c: the model parameter 'window' must be a short plain string");
        break;
    default:
        break;
    }
    if (ok) {
        nereus_log(NEREUS_BACKEND_HOST_LOG_LEVEL_INFO, "moving_average_c: model '%.*s' version %lld, window %lld",
                   (int)model->name.len, (const char *)model->name.ptr, (long long)model->version,
                   (long long)model_window);
    }
    exports_nereus_backend_lifecycle_model_info_free(model);
    return ok;
}

/* Trailing means of `n` floats at `x` over `window` into `y`. */
static void moving_average(const uint8_t *x, size_t n, int64_t window, uint8_t *y) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        float v, out;
        memcpy(&v, x + 4 * i, 4);
        sum += v;
        if ((int64_t)i >= window) {
            float old;
            memcpy(&old, x + 4 * (i - (size_t)window), 4);
            sum -= old;
        }
        size_t count = (int64_t)i + 1 < window ? i + 1 : (size_t)window;
        out = (float)(sum / (double)count);
        memcpy(y + 4 * i, &out, 4);
    }
}

/* A response parameter `key` = `value` (int64), its key on the heap. */
static void int_parameter(nereus_backend_types_parameter_t *p, const char *key, int64_t value) {
    backend_string_dup(&p->key, key);
    p->value.tag = NEREUS_BACKEND_TYPES_PARAMETER_VALUE_INT64;
    p->value.val.int64 = value;
}

/* Answers request `index`. False (with `err`) only when the host refused what was sent. */
static bool answer(uint32_t index, const nereus_request_t *request, size_t batch_size, backend_string_t *err) {
    const nereus_backend_types_error_kind_t invalid = NEREUS_BACKEND_TYPES_ERROR_KIND_INVALID_ARGUMENT;
    if (nereus_backend_host_is_cancelled(index)) {
        return nereus_fail(index, NEREUS_BACKEND_TYPES_ERROR_KIND_UNAVAILABLE, err, "cancelled");
    }
    int64_t window = model_window;
    const nereus_value_t *w = nereus_parameter(request, "window");
    if (w) {
        if (w->tag == NEREUS_BACKEND_TYPES_PARAMETER_VALUE_INT64 && w->val.int64 >= 1) window = w->val.int64;
        else if (w->tag == NEREUS_BACKEND_TYPES_PARAMETER_VALUE_UINT64 && w->val.uint64 >= 1 &&
                 w->val.uint64 <= INT64_MAX)
            window = (int64_t)w->val.uint64;
        else return nereus_fail(index, invalid, err, "the request parameter 'window' must be an integer >= 1");
    }
    const nereus_tensor_t *x = nereus_input(request, "INPUT0");
    if (!x) return nereus_fail(index, invalid, err, "request has no input 'INPUT0'");
    if (x->datatype != NEREUS_BACKEND_TYPES_DATA_TYPE_FP32 || x->shape.len == 0) {
        return nereus_fail(index, invalid, err, "INPUT0 must be FP32 with at least one dimension, not %s of rank %zu",
                           nereus_datatype_name(x->datatype), x->shape.len);
    }
    size_t n = (size_t)x->shape.ptr[x->shape.len - 1], total = nereus_elements(x);
    nereus_response_t response = {{nereus_xmalloc(sizeof(nereus_tensor_t)), 1},
                                  {nereus_xmalloc(2 * sizeof(nereus_backend_types_parameter_t)), 2}};
    nereus_tensor_t *y = response.outputs.ptr;
    nereus_tensor_new(y, "OUTPUT0", x->datatype, x->shape.ptr, x->shape.len, total * 4);
    for (size_t row = 0; n > 0 && row < total / n; row++) {
        moving_average(x->data.ptr + 4 * n * row, n, window, y->data.ptr + 4 * n * row);
    }
    int_parameter(&response.parameters.ptr[0], "window", window);
    int_parameter(&response.parameters.ptr[1], "batch_size", (int64_t)batch_size);
    return nereus_respond(index, &response, err);
}

bool exports_nereus_backend_lifecycle_execute(nereus_requests_t *requests, backend_string_t *err) {
    bool ok = true;
    for (uint32_t i = 0; ok && i < requests->len; i++) ok = answer(i, &requests->ptr[i], requests->len, err);
    exports_nereus_backend_lifecycle_list_request_free(requests);
    return ok;
}
