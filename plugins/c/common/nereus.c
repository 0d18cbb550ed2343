/* Helpers for the C plugins (see nereus.h), and default lifecycle functions: weak definitions that
 * free their arguments and succeed, for a plugin to override where it has work to do. */
#include "nereus.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *nereus_xmalloc(size_t size) {
    void *p = malloc(size ? size : 1);
    if (!p) abort();
    return p;
}

bool nereus_str_eq(const backend_string_t *s, const char *c) {
    size_t n = strlen(c);
    return s->len == n && (n == 0 || memcmp(s->ptr, c, n) == 0);
}

nereus_tensor_t *nereus_input(const nereus_request_t *request, const char *name) {
    for (size_t i = 0; i < request->inputs.len; i++) {
        if (nereus_str_eq(&request->inputs.ptr[i].name, name)) return &request->inputs.ptr[i];
    }
    return NULL;
}

const nereus_value_t *nereus_parameter(const nereus_request_t *request, const char *key) {
    for (size_t i = 0; i < request->parameters.len; i++) {
        if (nereus_str_eq(&request->parameters.ptr[i].key, key)) return &request->parameters.ptr[i].value;
    }
    return NULL;
}

bool nereus_wants(const nereus_request_t *request, const char *name) {
    for (size_t i = 0; i < request->requested_outputs.len; i++) {
        if (nereus_str_eq(&request->requested_outputs.ptr[i], name)) return true;
    }
    return false;
}

const char *nereus_datatype_name(nereus_backend_types_data_type_t datatype) {
    static const char *const names[] = {"BOOL",  "UINT8", "UINT16", "UINT32", "UINT64", "INT8",  "INT16",
                                        "INT32", "INT64", "FP16",   "FP32",   "FP64",   "BYTES", "BF16"};
    return datatype < sizeof names / sizeof names[0] ? names[datatype] : "?";
}

size_t nereus_element_size(nereus_backend_types_data_type_t datatype) {
    static const unsigned char sizes[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 0, 2};
    return datatype < sizeof sizes ? sizes[datatype] : 0;
}

size_t nereus_elements(const nereus_tensor_t *tensor) {
    size_t n = 1;
    for (size_t i = 0; i < tensor->shape.len; i++) n *= (size_t)tensor->shape.ptr[i];
    return n;
}

/* A heap copy of the formatted message, as a WIT string. */
static void vformat(backend_string_t *out, const char *format, va_list args) {
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(NULL, 0, format, args);
    if (n < 0) n = 0;
    char *text = nereus_xmalloc((size_t)n + 1);
    vsnprintf(text, (size_t)n + 1, format, again);
    va_end(again);
    out->ptr = (uint8_t *)text;
    out->len = (size_t)n;
}

void nereus_log(nereus_backend_host_log_level_t level, const char *format, ...) {
    backend_string_t message;
    va_list args;
    va_start(args, format);
    vformat(&message, format, args);
    va_end(args);
    nereus_backend_host_log(level, &message); /* borrowed by the host: still ours */
    free(message.ptr);
}

bool nereus_error(backend_string_t *err, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vformat(err, format, args); /* freed by the bindings' cabi_post_* once the host has read it */
    va_end(args);
    return false;
}

bool nereus_fail(uint32_t index, nereus_backend_types_error_kind_t kind, backend_string_t *err, const char *format,
                 ...) {
    backend_string_t message;
    va_list args;
    va_start(args, format);
    vformat(&message, format, args);
    va_end(args);
    bool sent = nereus_backend_host_send_error(index, kind, &message, err); /* on failure `err` is ours */
    free(message.ptr);
    return sent;
}

void nereus_tensor_new(nereus_tensor_t *tensor, const char *name, nereus_backend_types_data_type_t datatype,
                       const int64_t *shape, size_t rank, size_t bytes) {
    backend_string_dup(&tensor->name, name);
    tensor->datatype = datatype;
    /* Empty lists get no array: the *_free functions free an array only when the length is not 0. */
    tensor->shape.len = rank;
    tensor->shape.ptr = rank ? nereus_xmalloc(rank * sizeof(int64_t)) : NULL;
    if (rank) memcpy(tensor->shape.ptr, shape, rank * sizeof(int64_t));
    tensor->data.len = bytes;
    tensor->data.ptr = bytes ? nereus_xmalloc(bytes) : NULL;
}

bool nereus_respond(uint32_t index, nereus_response_t *response, backend_string_t *err) {
    bool sent = nereus_backend_host_send_response(index, response, true, err);
    nereus_backend_types_response_free(response);
    return sent;
}

/* A minimal JSON reader, enough to find parameters.<key>.string_value in the configuration the
 * host writes (`GET /v2/models/<m>/config`'s JSON). */
static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* p at a '"': returns the position after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') p++;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *end) {
    p = skip_ws(p, end);
    if (p >= end) return NULL;
    if (*p == '"') return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < end) {
            if (*p == '"') {
                p = skip_string(p, end);
                if (!p) return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
            p++;
        }
        return NULL;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n') p++;
    return p;
}

/* p at an object: the start of the value of `key` in it, or NULL. */
static const char *object_get(const char *p, const char *end, const char *key) {
    size_t key_len = strlen(key);
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return NULL;
    p++;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end || *p != '"') return NULL;
        const char *name = p + 1;
        p = skip_string(p, end);
        if (!p) return NULL;
        size_t name_len = (size_t)(p - 1 - name);
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        if (name_len == key_len && memcmp(name, key, key_len) == 0) return p;
        p = skip_value(p, end);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end || *p != ',') return NULL;
        p++;
    }
}

int nereus_config_parameter(const backend_string_t *config_json, const char *key, char *out, size_t cap) {
    const char *p = (const char *)config_json->ptr, *end = p + config_json->len;
    if (config_json->len == 0) return 0;
    p = object_get(p, end, "parameters");
    if (p) p = object_get(p, end, key);
    if (p) p = object_get(p, end, "string_value");
    if (!p) return 0;
    const char *close = skip_string(p, end);
    if (*p != '"' || !close) return -1;
    size_t n = (size_t)(close - 1 - (p + 1));
    if (n + 1 > cap || memchr(p + 1, '\\', n)) return -1;
    memcpy(out, p + 1, n);
    out[n] = '\0';
    return 1;
}

/* Default lifecycle: each frees what it was given (it is the plugin's) and succeeds. */
__attribute__((weak)) bool exports_nereus_backend_lifecycle_initialize_backend(backend_string_t *backend_name,
                                                                               backend_string_t *err) {
    (void)err;
    backend_string_free(backend_name);
    return true;
}

__attribute__((weak)) void exports_nereus_backend_lifecycle_finalize_backend(void) {}

__attribute__((weak)) bool exports_nereus_backend_lifecycle_initialize_model(
    exports_nereus_backend_lifecycle_model_info_t *model, backend_string_t *err) {
    (void)err;
    exports_nereus_backend_lifecycle_model_info_free(model);
    return true;
}

__attribute__((weak)) void exports_nereus_backend_lifecycle_finalize_model(void) {}

__attribute__((weak)) bool exports_nereus_backend_lifecycle_initialize_instance(
    exports_nereus_backend_lifecycle_instance_info_t *instance, backend_string_t *err) {
    (void)err;
    exports_nereus_backend_lifecycle_instance_info_free(instance);
    return true;
}

__attribute__((weak)) void exports_nereus_backend_lifecycle_finalize_instance(void) {}
