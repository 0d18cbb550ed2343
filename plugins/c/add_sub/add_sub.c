/*
 * add_sub_c: Triton's `simple` model in C, the same behaviour as the Rust plugins/add_sub behind
 * model_repository/simple. OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise,
 * for INT32 (wrapping) or FP32 inputs of any shape; only the outputs the client asked for are
 * computed. A request without INPUT0 fails the whole batch (execute returns an error); the other
 * faults fail their own request (invalid-argument).
 *
 * Ownership (see ../common/nereus.h): `requests` is ours and freed before returning; the responses
 * are built from nereus_xmalloc'd memory and freed by nereus_respond once sent.
 */
#include <stdlib.h>
#include <string.h>

#include "nereus.h"

/* Element-wise sum and difference of n elements at a and b into sum and diff (either may be NULL). */
static void int32_add_sub(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *sum, uint8_t *diff) {
    for (size_t i = 0; i < n; i++) {
        uint32_t x, y, r; /* unsigned: wrapping, as in Rust's wrapping_add/wrapping_sub */
        memcpy(&x, a + 4 * i, 4);
        memcpy(&y, b + 4 * i, 4);
        if (sum) r = x + y, memcpy(sum + 4 * i, &r, 4);
        if (diff) r = x - y, memcpy(diff + 4 * i, &r, 4);
    }
}

static void fp32_add_sub(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *sum, uint8_t *diff) {
    for (size_t i = 0; i < n; i++) {
        float x, y, r;
        memcpy(&x, a + 4 * i, 4);
        memcpy(&y, b + 4 * i, 4);
        if (sum) r = x + y, memcpy(sum + 4 * i, &r, 4);
        if (diff) r = x - y, memcpy(diff + 4 * i, &r, 4);
    }
}

/* Answers request `index`: its response, or its error. False (with `err`) when the host refused. */
static bool add_sub(uint32_t index, const nereus_request_t *request, const nereus_tensor_t *x,
                    backend_string_t *err) {
    const nereus_backend_types_error_kind_t invalid = NEREUS_BACKEND_TYPES_ERROR_KIND_INVALID_ARGUMENT;
    const nereus_tensor_t *y = nereus_input(request, "INPUT1");
    if (!y) return nereus_fail(index, invalid, err, "request has no input 'INPUT1'");
    if (y->datatype != x->datatype) {
        return nereus_fail(index, invalid, err, "tensor 'INPUT1' is %s, not %s", nereus_datatype_name(y->datatype),
                           nereus_datatype_name(x->datatype));
    }
    size_t n = x->data.len / 4;
    if (y->data.len / 4 != n) {
        return nereus_fail(index, invalid, err, "INPUT0 and INPUT1 must have the same number of elements");
    }
    const char *names[2] = {"OUTPUT0", "OUTPUT1"};
    nereus_tensor_t outputs[2];
    size_t count = 0;
    uint8_t *sum = NULL, *diff = NULL;
    for (int k = 0; k < 2; k++) {
        if (!nereus_wants(request, names[k])) continue;
        nereus_tensor_new(&outputs[count], names[k], x->datatype, x->shape.ptr, x->shape.len, n * 4);
        *(k == 0 ? &sum : &diff) = outputs[count].data.ptr;
        count++;
    }
    if (x->datatype == NEREUS_BACKEND_TYPES_DATA_TYPE_INT32) int32_add_sub(x->data.ptr, y->data.ptr, n, sum, diff);
    else fp32_add_sub(x->data.ptr, y->data.ptr, n, sum, diff);
    /* (An empty list's array is never freed: allocate one only for outputs.) */
    nereus_response_t response = {{count ? nereus_xmalloc(count * sizeof outputs[0]) : NULL, count}, {NULL, 0}};
    if (count) memcpy(response.outputs.ptr, outputs, count * sizeof outputs[0]);
    return nereus_respond(index, &response, err);
}

bool exports_nereus_backend_lifecycle_execute(nereus_requests_t *requests, backend_string_t *err) {
    bool ok = true;
    for (uint32_t i = 0; ok && i < requests->len; i++) {
        const nereus_request_t *request = &requests->ptr[i];
        const nereus_tensor_t *x = nereus_input(request, "INPUT0");
        if (!x) {
            ok = nereus_error(err, "request has no input 'INPUT0'");
        } else if (x->datatype == NEREUS_BACKEND_TYPES_DATA_TYPE_INT32 ||
                   x->datatype == NEREUS_BACKEND_TYPES_DATA_TYPE_FP32) {
            ok = add_sub(i, request, x, err);
        } else {
            ok = nereus_fail(i, NEREUS_BACKEND_TYPES_ERROR_KIND_INVALID_ARGUMENT, err,
                             "add_sub supports INT32 and FP32, not %s", nereus_datatype_name(x->datatype));
        }
    }
    exports_nereus_backend_lifecycle_list_request_free(requests);
    return ok;
}
