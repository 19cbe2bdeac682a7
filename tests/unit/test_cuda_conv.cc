/* The CUDA backend's convolution ways (src/cuda/conv_choice.cu) on the
 * emulation: a network of more convolution shapes than the backend keeps
 * ways for (CHOICE_SHAPES, 128) runs on, the shapes beyond the table by
 * im2col + GEMM with one warning (it ended the job before), and their
 * forward and backward give the CPU backend's results within float
 * summation order.
 * Output in cmocka's format, as tests/lib.sh prints it. */
#include "../../src/cuda/cuda.h" /* private: the backend's state */
#include "cc_cases.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static const hcnn_backend *the_gpu, *the_cpu;

/* 3x3 convolutions of 2 input channels over 6x6 images, stride 1, padding
 * 1, out_c channels: one shape a count of output channels */
static hcnn_conv_desc shape_of(int out_c) {
    hcnn_conv_desc d{};
    d.g.c = 2, d.g.h = 6, d.g.w = 6, d.g.kh = 3, d.g.kw = 3, d.g.sh = 1, d.g.sw = 1;
    d.g.ph = 1, d.g.pw = 1, d.g.oh = 6, d.g.ow = 6;
    d.out_c = out_c;
    d.cache = nullptr;
    return d;
}

static float *dev_copy(const hcnn_backend *be, const std::vector<float> &h) {
    float *d = (float *)be->alloc(be, h.size() * sizeof(float), "test tensor");
    be->upload(be, d, h.data(), h.size() * sizeof(float));
    return d;
}

static std::vector<float> host_copy(const hcnn_backend *be, const float *d, size_t n) {
    std::vector<float> h(n);
    be->sync(be);
    be->download(be, h.data(), d, n * sizeof(float));
    return h;
}

struct conv_out {
    std::vector<float> y, dw, dx;
};

/* forward and backward of d over n images on be */
static conv_out run_conv(const hcnn_backend *be, const hcnn_conv_desc &d, int n,
                         const std::vector<float> &x, const std::vector<float> &w,
                         const std::vector<float> &dy) {
    const size_t ny = (size_t)n * d.out_c * d.g.oh * d.g.ow, nw = w.size();
    hcnn_exec ex{};
    ex.max_chunk_floats = (size_t)1 << 20; /* as the conformance suite's */
    const size_t ws = be->conv_workspace(be, &d, &ex, n);
    ex.ws = (float *)be->alloc(be, (ws ? ws : 1) * sizeof(float), "test workspace");
    ex.ws_floats = ws;
    float *dx_ = dev_copy(be, x), *dw_ = dev_copy(be, std::vector<float>(nw, 0.0f));
    float *x_ = dev_copy(be, x), *w_ = dev_copy(be, w), *dy_ = dev_copy(be, dy);
    float *y_ = dev_copy(be, std::vector<float>(ny, 0.0f));
    CHECK(be->conv_fwd(be, &d, &ex, x_, w_, nullptr, y_, n) == HCNN_OK);
    CHECK(be->conv_bwd(be, &d, &ex, x_, w_, dy_, dw_, nullptr, dx_, 0, n) == HCNN_OK);
    conv_out o{host_copy(be, y_, ny), host_copy(be, dw_, nw), host_copy(be, dx_, x.size())};
    for (float *p : {x_, w_, dy_, y_, dw_, dx_, ex.ws})
        be->free(be, p);
    return o;
}

static double max_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double m = a.size() == b.size() ? 0.0 : INFINITY;
    for (size_t i = 0; i < a.size() && i < b.size(); i++)
        m = std::fmax(m, std::fabs((double)a[i] - (double)b[i]));
    return m;
}

static void test_more_shapes_than_the_table() {
    const int n = 2, shapes = 131; /* 128 kept, 3 beyond */
    uint64_t s = 42;
    auto rnd = [&s]() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((double)(s >> 40) / (double)(1ull << 24) - 0.5);
    };
    for (int k = 1; k <= shapes; k++) {
        const hcnn_conv_desc d = shape_of(k);
        const bool check = k <= 2 || k > shapes - 3; /* two in the table, the three beyond */
        hcnn_exec ex{};
        ex.max_chunk_floats = (size_t)1 << 20;
        if (!check) { /* a place in the table, nothing run */
            CHECK(the_gpu->conv_workspace(the_gpu, &d, &ex, n) > 0);
            continue;
        }
        std::vector<float> x((size_t)n * 2 * 36), w((size_t)k * 2 * 9), dy((size_t)n * k * 36);
        for (float &v : x)
            v = rnd();
        for (float &v : w)
            v = rnd();
        for (float &v : dy)
            v = rnd();
        const conv_out g = run_conv(the_gpu, d, n, x, w, dy), c = run_conv(the_cpu, d, n, x, w, dy);
        const double ey = max_diff(g.y, c.y), ew = max_diff(g.dw, c.dw), ex_ = max_diff(g.dx, c.dx);
        if (!(ey <= 1e-5 && ew <= 1e-5 && ex_ <= 1e-5))
            printf("# shape %d: max |gpu - cpu| y %g, dw %g, dx %g (expected <= 1e-5)\n", k, ey,
                   ew, ex_);
        CHECK(ey <= 1e-5);
        CHECK(ew <= 1e-5);
        CHECK(ex_ <= 1e-5);
        /* the describe line says why a shape beyond the table runs by im2col */
        char line[2048];
        the_gpu->conv_describe(the_gpu, &d, &ex, n, line, sizeof line);
        const bool said = strstr(line, "more convolution shapes than the backend keeps") != nullptr;
        if (said != (k > 128))
            printf("# shape %d: %s\n", k, line);
        CHECK(said == (k > 128));
    }
}

static const test_case cases[] = {
    {"more_shapes_than_the_table", test_more_shapes_than_the_table},
};

int main() {
    setenv("HCNN_EMU_DEVICE_MB", "256", 1); /* before the first call maps the arena */
    hcnn_backend *gpu = nullptr, *cpu = nullptr;
    if (hcnn_backend_create("cuda", 0, &gpu) != HCNN_OK ||
        hcnn_backend_create("cpu", 0, &cpu) != HCNN_OK) {
        printf("# a backend does not start (its message above)\n");
        return 1;
    }
    the_gpu = gpu, the_cpu = cpu;
    const int rc = run_cases(cases, sizeof cases / sizeof *cases);
    hcnn_backend_destroy(cpu);
    hcnn_backend_destroy(gpu);
    return rc;
}
