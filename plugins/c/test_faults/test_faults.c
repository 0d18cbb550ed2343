/*
 * test_faults_c: a C test backend that misbehaves on request, to show that the sandbox holds for C
 * as it does for Rust (plugins/test_faults). INPUT0 INT32 [-1] comes back as OUTPUT0, unless the
 * request parameter "fault" says otherwise:
 *   "trap"  __builtin_trap() in trap_on_request (the server's trap log must name that function);
 *   "loop"  never returns (the execution deadline stops it);
 *   "oom"   mallocs 16 MiB blocks without bound (sandbox.memory_limit_mb stops it: malloc returns
 *           NULL at the cap, nereus_xmalloc aborts);
 *   "error" execute returns an error;
 *   "read_file" reads the file named by the request parameter "path" with stdio, which goes through
 *           WASI (and so through the wasip1 adapter): the sandbox grants no file, so the request
 *           fails with "cannot read PATH: REASON", and the module imports WASI for once.
 *
 * The echo moves INPUT0's buffers into the response instead of copying them: the request is ours
 * (see ../common/nereus.h), so its tensor can be handed over, and is then freed with the response.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nereus.h"

__attribute__((noinline)) static void trap_on_request(void) {
    __builtin_trap();
}

__attribute__((noinline)) static void loop_forever(void) {
    volatile uint64_t x = 0;
    for (;;) x = x + 1;
}

__attribute__((noinline)) static void allocate_without_bound(void) {
    for (;;) {
        volatile uint8_t *block = nereus_xmalloc(16 << 20);
        memset((void *)block, 1, 16 << 20);
    }
}

bool exports_nereus_backend_lifecycle_execute(nereus_requests_t *requests, backend_string_t *err) {
    bool ok = true;
    for (uint32_t i = 0; ok && i < requests->len; i++) {
        nereus_request_t *request = &requests->ptr[i];
        const nereus_value_t *fault = nereus_parameter(request, "fault");
        const backend_string_t *name = fault && fault->tag == NEREUS_BACKEND_TYPES_PARAMETER_VALUE_TEXT
                                           ? &fault->val.text : NULL;
        if (name && nereus_str_eq(name, "trap")) trap_on_request();
        if (name && nereus_str_eq(name, "loop")) loop_forever();
        if (name && nereus_str_eq(name, "oom")) allocate_without_bound();
        if (name && nereus_str_eq(name, "error")) {
            ok = nereus_error(err, "test_faults_c: execution error requested");
            break;
        }
        if (name && nereus_str_eq(name, "read_file")) {
            const nereus_value_t *path = nereus_parameter(request, "path");
            char file[256] = "";
            if (path && path->tag == NEREUS_BACKEND_TYPES_PARAMETER_VALUE_TEXT && path->val.text.len < sizeof file) {
                memcpy(file, path->val.text.ptr, path->val.text.len);
            }
            FILE *f = fopen(file, "r");
            if (!f) {
                ok = nereus_fail(i, NEREUS_BACKEND_TYPES_ERROR_KIND_INVALID_ARGUMENT, err, "cannot read %s: %s", file,
                                 strerror(errno));
                continue;
            }
            fclose(f);
        }
        nereus_tensor_t *input = nereus_input(request, "INPUT0");
        if (!input) {
            ok = nereus_fail(i, NEREUS_BACKEND_TYPES_ERROR_KIND_INVALID_ARGUMENT, err, "request has no input 'INPUT0'");
            continue;
        }
        /* Move the input into the response: the request gives up its buffers (so freeing the
         * request later does not free them again), the response frees them once sent. */
        nereus_response_t response = {{nereus_xmalloc(sizeof(nereus_tensor_t)), 1}, {NULL, 0}};
        nereus_tensor_t *output = response.outputs.ptr;
        *output = *input;
        memset(input, 0, sizeof *input);
        backend_string_free(&output->name);
        backend_string_dup(&output->name, "OUTPUT0");
        ok = nereus_respond(i, &response, err);
    }
    exports_nereus_backend_lifecycle_list_request_free(requests);
    return ok;
}
