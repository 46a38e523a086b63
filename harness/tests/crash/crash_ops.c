/* A custom-op library that crashes on purpose, for the crash-isolation test (harness/tests/crash.rs).
 *
 * ONNX Runtime calls RegisterCustomOps when a session's options register the library: the suite's own sessions do
 * when a package's genai_config.json names it (session_options.custom_ops_library), and onnxruntime-genai does when
 * it loads such a package. It says so on stderr (the runtime's last words the suite must show), then dies: with
 * -DCRASH_ABORT by abort() (SIGABRT, as a C++ runtime's std::terminate does), otherwise by writing through a null
 * pointer (SIGSEGV). */
#include <stdio.h>
#include <stdlib.h>

void *RegisterCustomOps(void *options, const void *api_base) {
    (void)options;
    (void)api_base;
    fprintf(stderr, "crash_ops: RegisterCustomOps called; crashing on purpose\n");
    fflush(stderr);
#ifdef CRASH_ABORT
    abort();
#else
    *(volatile int *)0 = 1;
#endif
    return 0;
}
