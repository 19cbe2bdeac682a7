/* The harness of the C++ unit tests (tests/unit/test_cuda_emu.cc,
 * test_cuda_bn.cc; cmocka is C): CHECK counts a case's failures, and
 * run_cases prints each case's result in cmocka's format, as tests/lib.sh
 * reads it.  Plain C++: it compiles under nvcc too. */
#ifndef HCNN_TESTS_CC_CASES_H
#define HCNN_TESTS_CC_CASES_H

#include <cstdio>
#include <string>

static int case_failures;

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            printf("# %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
            ++case_failures;                                                                      \
        }                                                                                         \
    } while (0)

struct test_case {
    const char *name;
    void (*fn)();
};

/* Runs the n cases; 0 when every one passed, else 1 (after the list of
 * the failed ones) */
static int run_cases(const test_case *cases, size_t n) {
    int passed = 0, failed = 0;
    std::string failed_names;
    for (size_t i = 0; i < n; i++) {
        const test_case &c = cases[i];
        printf("[ RUN      ] %s\n", c.name);
        case_failures = 0;
        c.fn();
        if (case_failures == 0) {
            printf("[       OK ] %s\n", c.name);
            ++passed;
        } else {
            printf("[  FAILED  ] %s\n", c.name);
            ++failed;
            failed_names += c.name;
            failed_names += '\n';
        }
        fflush(stdout);
    }
    printf("[==========] %d test(s) run.\n", passed + failed);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (!failed)
        return 0;
    printf("[  FAILED  ] %d test(s), listed below:\n", failed);
    size_t at = 0, nl;
    while ((nl = failed_names.find('\n', at)) != std::string::npos) {
        printf("[  FAILED  ] %s\n", failed_names.substr(at, nl - at).c_str());
        at = nl + 1;
    }
    return 1;
}

#endif
