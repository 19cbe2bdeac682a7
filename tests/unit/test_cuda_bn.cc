/* The CUDA backend's batch-norm (src/cuda/bn.cu) on the emulation: the
 * launches each call takes (issue 42: a forward in at most 3 launches and
 * 2 passes over x, the backward likewise; what nsys would list on a GPU,
 * counted here by the emulation's record_launches), the statistics a
 * convolution gathers giving the bits of the batch-norm's own, and a batch
 * too large for the reduction scratch, run in pieces, giving the results
 * of one piece (the backward's bits; the forward's merged statistics
 * within 1e-6).  An NHWC instance (HCNN_CUDA_LAYOUT=nhwc) takes 3 launches
 * a pass too, gives NCHW's results within 2e-6 (y: 1e-5; inference: the same bits)
 * and the same bits on every run, and its statistics the host's in its own
 * order bit for bit.  The channel kernels (rows staged in
 * shared memory, added a thread a channel) give src/core/hd.h's sums on the
 * host bit for bit, and bn_apply and bwd_dx four elements a thread give the
 * bits of one, in either layout.  The values themselves are the
 * conformance suite's (tests/conformance: bn_fwd_train, bn_bwd against a
 * double reference, in either layout).
 * Output in cmocka's format, as tests/lib.sh prints it. */
#include "../../src/cuda/cuda.h" /* private: the backend's state and its bn.cu calls */
#include "cc_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

/* the shape of the cases: 7x7 planes (a tail of 1 after 3 lanes' blocks),
 * 8 images, 6 channels */
enum { N = 8, C = 6, NP = 49 };
static const size_t TOTAL = (size_t)N * C * NP;

struct bn_io {
    std::vector<float> x, dy, add, gamma, beta;
};

static bn_io make_inputs() {
    bn_io io;
    uint64_t s = 12345;
    auto rnd = [&s]() { /* [-1, 1) */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    };
    io.x.resize(TOTAL), io.dy.resize(TOTAL), io.add.resize(TOTAL);
    for (size_t i = 0; i < TOTAL; i++) /* channel means of their own */
        io.x[i] = 3.0f * (float)(i / NP % C) + rnd(), io.dy[i] = rnd(), io.add[i] = rnd();
    for (int ch = 0; ch < C; ch++)
        io.gamma.push_back(1.0f + 0.1f * rnd()), io.beta.push_back(0.1f * rnd());
    return io;
}

/* device copies of the inputs and the outputs of one forward and backward */
struct bn_dev {
    const hcnn_backend *be;
    float *x, *dy, *add, *gamma, *beta, *y, *dx, *mean, *invstd, *rmean, *rvar, *dgamma, *dbeta,
        *db;
};

static float *dev_copy(const hcnn_backend *be, const std::vector<float> &h) {
    float *d = (float *)be->alloc(be, h.size() * sizeof(float), "test input");
    be->upload(be, d, h.data(), h.size() * sizeof(float));
    return d;
}

static std::vector<float> host(const hcnn_backend *be, const float *d, size_t n) {
    std::vector<float> h(n);
    be->download(be, h.data(), d, n * sizeof(float));
    return h;
}

static bn_dev dev_setup(const hcnn_backend *be, const bn_io &io) {
    const std::vector<float> zero(TOTAL, 0.0f), zc(C, 0.0f), one(C, 1.0f);
    return {be,
            dev_copy(be, io.x),
            dev_copy(be, io.dy),
            dev_copy(be, io.add),
            dev_copy(be, io.gamma),
            dev_copy(be, io.beta),
            dev_copy(be, zero),
            dev_copy(be, zero),
            dev_copy(be, zc),
            dev_copy(be, zc),
            dev_copy(be, zc),
            dev_copy(be, one),
            dev_copy(be, zc),
            dev_copy(be, zc),
            dev_copy(be, zc)};
}

static void dev_free(const bn_dev &d) {
    for (float *p : {d.x, d.dy, d.add, d.gamma, d.beta, d.y, d.dx, d.mean, d.invstd, d.rmean,
                     d.rvar, d.dgamma, d.dbeta, d.db})
        d.be->free(d.be, p);
}

/* the results a comparison looks at, downloaded */
static std::vector<std::vector<float>> results(const bn_dev &d) {
    const hcnn_backend *be = d.be;
    return {host(be, d.y, TOTAL),      host(be, d.dx, TOTAL),     host(be, d.mean, C),
            host(be, d.invstd, C),     host(be, d.rmean, C),      host(be, d.rvar, C),
            host(be, d.dgamma, C),     host(be, d.dbeta, C),      host(be, d.db, C)};
}
static const char *const result_names[] = {"y",           "dx",          "save_mean",
                                           "save_invstd", "running_mean", "running_var",
                                           "dgamma",      "dbeta",       "channel sum"};

/* the kernels one call launches */
template <class F> static std::vector<std::string> launches_of(const hcnn_backend *be, F call) {
    std::vector<const char *> names;
    hcnn_emu::record_launches(&names);
    call();
    hcnn_emu::record_launches(nullptr);
    be->sync(be);
    return std::vector<std::string>(names.begin(), names.end());
}

static std::string joined(const std::vector<std::string> &v) {
    std::string s;
    for (const std::string &n : v)
        s += (s.empty() ? "" : " ") + n;
    return s;
}

#define CHECK_LAUNCHES(got, want)                                                                 \
    do {                                                                                          \
        const std::string g_ = joined(got);                                                       \
        if (g_ != (want)) {                                                                       \
            printf("# %s:%d: launches: %s, expected %s\n", __FILE__, __LINE__, g_.c_str(),      \
                   (want));                                                                       \
            ++case_failures;                                                                      \
        }                                                                                         \
    } while (0)

static const hcnn_backend *the_backend;

static void forward(const bn_dev &d, const hcnn_bn_stats *stats) {
    d.be->bn_fwd_train(d.be, d.x, N, C, NP, d.gamma, d.beta, 1e-5f, 0.1f, d.rmean, d.rvar, d.mean,
                       d.invstd, d.add, 1, stats, d.y);
}
static void backward(const bn_dev &d) {
    d.be->bn_bwd(d.be, d.x, d.dy, N, C, NP, d.gamma, d.beta, d.mean, d.invstd, 1, d.dx, d.dgamma,
                 d.dbeta);
}

/* forward: plane_stats, bn_channel_stats, bn_apply; backward: bwd_plane,
 * bwd_channel, bwd_dx; the bias gradient's channel sum: plane_stats,
 * channel_total */
static void test_launches_per_call() {
    const hcnn_backend *be = the_backend;
    const bn_dev d = dev_setup(be, make_inputs());
    CHECK_LAUNCHES(launches_of(be, [&] { forward(d, nullptr); }),
                   "plane_stats_kernel bn_channel_stats_kernel bn_apply_kernel");
    CHECK_LAUNCHES(launches_of(be, [&] { backward(d); }),
                   "bwd_plane_kernel bwd_channel_kernel bwd_dx_kernel");
    CHECK_LAUNCHES(launches_of(be, [&] { hcnn_cuda_channel_sum_acc(be, d.dy, N, C, NP, d.db); }),
                   "plane_stats_kernel channel_total_kernel");
    dev_free(d);
}

/* the statistics gathered after a convolution (one launch), then the
 * forward from them (two): the bits of the forward gathering its own */
static void test_gathered_statistics() {
    const hcnn_backend *be = the_backend;
    const bn_io io = make_inputs();
    const bn_dev own = dev_setup(be, io), gathered = dev_setup(be, io);
    forward(own, nullptr);
    hcnn_bn_stats stats = {};
    stats.cap = TOTAL; /* floats: more than N * C * 2 */
    stats.part = (float *)be->alloc(be, stats.cap * sizeof(float), "statistics table");
    CHECK_LAUNCHES(launches_of(be, [&] { hcnn_cuda_bn_gather(be, gathered.x, N, C, NP, &stats); }),
                   "plane_stats_kernel");
    CHECK(stats.bands == 1 && stats.band_px == NP);
    CHECK_LAUNCHES(launches_of(be, [&] { forward(gathered, &stats); }),
                   "bn_channel_stats_kernel bn_apply_kernel");
    const auto a = results(own), b = results(gathered);
    for (size_t k = 0; k < a.size(); k++)
        if (memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0) {
            printf("# %s: the gathered statistics give other bits\n", result_names[k]);
            ++case_failures;
        }
    be->free(be, stats.part);
    dev_free(own), dev_free(gathered);
}

/* the scratch doubles of a call keeping `per` doubles a channel and
 * `floats` a plane, for 3 images */
static size_t three_images(int per, int floats) {
    return (size_t)per * C + 3 * (((size_t)C * floats + 1) / 2);
}

/* A scratch holding 3 images' tables: 3 pieces of 3, 3 and 2 images, each a
 * plane and a channel launch; the backward's and the channel sum's bits
 * are those of one piece (the same double sums carried over), the
 * forward's within 1e-6 (the pieces' statistics merged) */
static void test_pieces() {
    const hcnn_backend *be = the_backend;
    const bn_io io = make_inputs();
    const bn_dev whole = dev_setup(be, io), pieces = dev_setup(be, io);
    forward(whole, nullptr), backward(whole);
    hcnn_cuda_channel_sum_acc(be, whole.dy, N, C, NP, whole.db);
    hcnn_cuda *cu = cuda_of(be);
    const size_t keep = cu->scratch_doubles;
    cu->scratch_doubles = three_images(2, 2); /* the forward's: mean and m2 a channel */
    CHECK_LAUNCHES(launches_of(be, [&] { forward(pieces, nullptr); }),
                   "plane_stats_kernel bn_channel_stats_kernel plane_stats_kernel "
                   "bn_channel_stats_kernel plane_stats_kernel bn_channel_stats_kernel "
                   "bn_apply_kernel");
    cu->scratch_doubles = three_images(3, 2); /* two sums and two means a channel */
    CHECK_LAUNCHES(launches_of(be, [&] { backward(pieces); }),
                   "bwd_plane_kernel bwd_channel_kernel bwd_plane_kernel bwd_channel_kernel "
                   "bwd_plane_kernel bwd_channel_kernel bwd_dx_kernel");
    cu->scratch_doubles = three_images(1, 1);
    CHECK_LAUNCHES(
        launches_of(be, [&] { hcnn_cuda_channel_sum_acc(be, pieces.dy, N, C, NP, pieces.db); }),
        "plane_stats_kernel channel_total_kernel plane_stats_kernel channel_total_kernel "
        "plane_stats_kernel channel_total_kernel");
    cu->scratch_doubles = keep;
    const auto a = results(whole), b = results(pieces);
    for (size_t k = 0; k < a.size(); k++) {
        double worst = 0.0;
        for (size_t i = 0; i < a[k].size(); i++) {
            const double e = fabs((double)a[k][i] - b[k][i]) / fmax(1.0, fabs((double)a[k][i]));
            worst = e > worst ? e : worst;
        }
        const bool exact = memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0;
        if (!exact)
            printf("# %s: in pieces, other bits (at most %.2e relative)\n", result_names[k], worst);
        /* the forward's results (y and the four statistics) may differ in
         * the last bits, not more; the backward's depend on the forward's
         * statistics, so they are compared from the same ones below */
        CHECK(worst <= 1e-6);
        if (k == 8)
            CHECK(exact);
    }
    /* the backward in pieces from the whole forward's statistics: its bits */
    cu->scratch_doubles = three_images(3, 2);
    be->upload(be, pieces.mean, a[2].data(), C * sizeof(float));
    be->upload(be, pieces.invstd, a[3].data(), C * sizeof(float));
    const std::vector<float> zc(C, 0.0f);
    be->upload(be, pieces.dgamma, zc.data(), C * sizeof(float));
    be->upload(be, pieces.dbeta, zc.data(), C * sizeof(float));
    backward(pieces);
    cu->scratch_doubles = keep;
    const auto c = results(pieces);
    for (size_t k : {1, 6, 7}) /* dx, dgamma, dbeta */
        if (memcmp(a[k].data(), c[k].data(), a[k].size() * sizeof(float)) != 0) {
            printf("# %s: the backward in pieces gives other bits\n", result_names[k]);
            ++case_failures;
        }
    dev_free(whole), dev_free(pieces);
}

/* ---- NHWC (HCNN_CUDA_LAYOUT=nhwc): x, add, y, dy, dx [n][np][c] ---- */

/* ---- the channel kernels against src/core/hd.h's sums, bit for bit ---- */

/* more rows than a block of bn_channel.cu's kernels stages at once (128),
 * more channels than one block takes (32: the second block part full) */
enum { SN = 150, SC = 40, TN = 50, TBANDS = 3, TBAND_PX = 7, TNP = 19 };

static std::vector<float> uniform(size_t n, float lo, float hi, uint64_t s) {
    std::vector<float> v(n);
    for (float &e : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        e = lo + (hi - lo) * (float)((double)(s >> 40) / (double)(1ull << 24));
    }
    return v;
}

/* a plane's sum as the CPU and bwd_plane add it: 16 lanes (lane l: elements
 * l, l + 16, ... of the whole blocks of 16) and the tail, hcnn_hd_lanes_total;
 * of dy (x NULL) or of dy * (x - m) * is */
static float plane_sum(const float *dy, const float *x, int np, float m, float is) {
    float acc[16] = {0.0f}, tail = 0.0f;
    const int whole = np / 16 * 16;
    for (int i = 0; i < np; i++) {
        const float v = x ? dy[i] * (x[i] - m) * is : dy[i];
        if (i < whole)
            acc[i % 16] += v;
        else
            tail += v;
    }
    return hcnn_hd_lanes_total(acc, tail);
}

static void check_bits(const char *what, const std::vector<float> &got,
                       const std::vector<float> &want) {
    for (size_t k = 0; k < got.size(); k++)
        if (memcmp(&got[k], &want[k], sizeof(float)) != 0) {
            printf("# %s[%zu]: %.9g, expected %.9g (src/core/hd.h's sums on the host)\n", what, k,
                   (double)got[k], (double)want[k]);
            ++case_failures;
            return;
        }
}

/* plane_stats_kernel's pair of a plane: its mean (the lanes' total over np
 * as a float) and the sum of squared deviations from it */
static void plane_pair(const float *x, int np, float *mean, float *m2) {
    std::vector<float> d(x, x + np);
    *mean = plane_sum(x, nullptr, np, 0.0f, 0.0f) / (float)np;
    for (float &v : d)
        v = (v - *mean) * (v - *mean);
    *m2 = plane_sum(d.data(), nullptr, np, 0.0f, 0.0f);
}

/* Over SN images of planes of np values: the forward's statistics from x
 * (plane_stats, then the channel kernel: each plane's pair, hd.h's table
 * statistics), the backward's dbeta and dgamma (no ReLU) and the bias
 * gradient's channel sum of the same dy, against the host's sums in the
 * same order, bit for bit; with piece > 0, the reduction scratch holding
 * `piece` images (the forward's pieces merged by hcnn_hd_bn_merge, the
 * backward's sums carried over) */
static void plane_sums_bits(const hcnn_backend *be, int np, int piece) {
    const size_t total = (size_t)SN * SC * np;
    const std::vector<float> zc(SC, 0.0f), one(SC, 1.0f);
    const std::vector<float> m = uniform(SC, -0.5f, 0.5f, 11), is = uniform(SC, 0.5f, 2.0f, 12);
    std::vector<float> x = uniform(total, -2.0f, 2.0f, 9), dy = uniform(total, -1.0f, 1.0f, 10);
    /* a cancelling pair: +-2^36 in the first element of the first two
     * images' planes (x equal there: g * xhat cancels too) */
    for (int ch = 0; ch < SC; ch++) {
        const size_t a = (size_t)ch * np, b = ((size_t)SC + ch) * np;
        dy[a] = 0x1p36f, dy[b] = -0x1p36f, x[b] = x[a];
    }
    float *dx_in = dev_copy(be, x), *ddy = dev_copy(be, dy), *dm = dev_copy(be, m),
          *dis = dev_copy(be, is), *dx = dev_copy(be, std::vector<float>(total, 0.0f)),
          *y = dev_copy(be, std::vector<float>(total, 0.0f)), *gamma = dev_copy(be, one),
          *beta = dev_copy(be, zc), *mean = dev_copy(be, zc), *invstd = dev_copy(be, zc),
          *rmean = dev_copy(be, zc), *rvar = dev_copy(be, one), *dgamma = dev_copy(be, zc),
          *dbeta = dev_copy(be, zc), *db = dev_copy(be, zc);
    hcnn_cuda *cu = cuda_of(be);
    const size_t keep = cu->scratch_doubles;
    /* the scratch of `piece` images: `per` doubles a channel, then the table
     * (bn.cu, scratch_layout) */
    auto pieces_of = [&](int per, int floats) {
        if (piece > 0)
            cu->scratch_doubles =
                (size_t)per * SC + (size_t)piece * (((size_t)SC * floats + 1) / 2);
    };
    /* each call's channel launches: one a piece */
    auto count = [](const std::vector<std::string> &v, const char *name) {
        return (int)std::count(v.begin(), v.end(), std::string(name));
    };
    const int want = piece > 0 ? (SN + piece - 1) / piece : 1;
    pieces_of(2, 2);
    const int fwd = count(launches_of(be, [&] {
        be->bn_fwd_train(be, dx_in, SN, SC, np, gamma, beta, 1e-5f, 0.1f, rmean, rvar, mean, invstd,
                         nullptr, 0, nullptr, y);
    }), "bn_channel_stats_kernel");
    pieces_of(3, 2);
    const int bwd = count(launches_of(be, [&] {
        be->bn_bwd(be, dx_in, ddy, SN, SC, np, gamma, beta, dm, dis, 0, dx, dgamma, dbeta);
    }), "bwd_channel_kernel");
    pieces_of(1, 1);
    const int tot =
        count(launches_of(be, [&] { hcnn_cuda_channel_sum_acc(be, ddy, SN, SC, np, db); }),
              "channel_total_kernel");
    cu->scratch_doubles = keep;
    if (fwd != want || bwd != want || tot != want) {
        printf("# channel launches %d, %d, %d, expected %d each\n", fwd, bwd, tot, want);
        ++case_failures;
    }
    std::vector<float> table(2 * (size_t)SN * SC), wm(SC), wis(SC), wrm(SC, 0.0f), wrv(SC, 1.0f),
        wdb(SC), wdg(SC);
    for (size_t q = 0; q < (size_t)SN * SC; q++)
        plane_pair(&x[q * np], np, &table[2 * q], &table[2 * q + 1]);
    for (int ch = 0; ch < SC; ch++) {
        double mu = 0.0, m2 = 0.0, done = 0.0, sdy = 0.0, sdyx = 0.0;
        const int step = piece > 0 ? piece : SN;
        for (int i0 = 0; i0 < SN; i0 += step) { /* bn.cu's pieces, merged in order */
            const int nb = SN - i0 < step ? SN - i0 : step;
            double pm, pm2;
            hcnn_hd_bn_table_stats(&table[2 * (size_t)i0 * SC], nb, SC, ch, 1, np, np, &pm, &pm2);
            hcnn_hd_bn_merge(done, &mu, &m2, (double)nb * np, pm, pm2);
            done += (double)nb * np;
        }
        wm[ch] = (float)mu;
        wis[ch] = hcnn_hd_bn_finish(mu, m2, done, 1e-5f, 0.1f, &wrm[ch], &wrv[ch]);
        for (int i = 0; i < SN; i++) {
            const size_t o = ((size_t)i * SC + ch) * np;
            sdy += plane_sum(&dy[o], nullptr, np, 0.0f, 0.0f);
            sdyx += plane_sum(&dy[o], &x[o], np, m[ch], is[ch]);
        }
        wdb[ch] = 0.0f + (float)sdy, wdg[ch] = 0.0f + (float)sdyx;
    }
    printf("# planes of %d values (%s), %s\n", np,
           np % 16 ? "a warp a plane" : "half a warp a plane",
           piece > 0 ? "in pieces" : "in one piece");
    check_bits("save_mean from x", host(be, mean, SC), wm);
    check_bits("save_invstd from x", host(be, invstd, SC), wis);
    check_bits("dbeta", host(be, dbeta, SC), wdb);
    check_bits("dgamma", host(be, dgamma, SC), wdg);
    check_bits("channel sum", host(be, db, SC), wdb);
    for (float *p : {dx_in, ddy, dm, dis, dx, y, gamma, beta, mean, invstd, rmean, rvar, dgamma,
                     dbeta, db})
        be->free(be, p);
}

/* The forward's statistics from a given table of TN images x TBANDS bands
 * (150 pieces): hcnn_hd_bn_table_stats and hcnn_hd_bn_finish's bits; then
 * plane_sums_bits over SN images: each plane's lanes, planes added in
 * double, images in order.  A row staged twice or left out, or added out of order, changes
 * the bits (a cancelling pair in each table makes the order show). */
static void test_channel_sums_bits() {
    const hcnn_backend *be = the_backend;
    const float eps = 1e-5f, momentum = 0.1f;
    /* forward */
    const size_t pieces = (size_t)TN * SC * TBANDS, ftotal = (size_t)TN * SC * TNP;
    std::vector<float> table = uniform(2 * pieces, 0.0f, 4.0f, 7);
    for (size_t k = 0; k < pieces; k++)
        table[2 * k] -= 2.0f; /* means in [-2, 2), deviations' sums in [0, 4) */
    /* the first two pieces' means +-2^30: they cancel, and the pieces
     * between and after them come out rounded to 2^-20 or exact by the
     * order they are added in (floats of one scale add exactly in double in
     * any order, and the float results would not show it) */
    for (int ch = 0; ch < SC; ch++)
        table[hcnn_hd_bn_piece_at(0, SC, ch, TBANDS)] = 0x1p30f,
        table[hcnn_hd_bn_piece_at(1, SC, ch, TBANDS)] = -0x1p30f;
    const std::vector<float> zc(SC, 0.0f), one(SC, 1.0f);
    float *dtable = dev_copy(be, table), *fx = dev_copy(be, uniform(ftotal, -1.0f, 1.0f, 8)),
          *fy = dev_copy(be, std::vector<float>(ftotal, 0.0f)), *gamma = dev_copy(be, one),
          *beta = dev_copy(be, zc), *mean = dev_copy(be, zc), *invstd = dev_copy(be, zc),
          *rmean = dev_copy(be, zc), *rvar = dev_copy(be, one);
    hcnn_bn_stats stats = {};
    stats.part = dtable, stats.cap = 2 * pieces, stats.bands = TBANDS, stats.band_px = TBAND_PX;
    be->bn_fwd_train(be, fx, TN, SC, TNP, gamma, beta, eps, momentum, rmean, rvar, mean, invstd,
                     nullptr, 0, &stats, fy);
    std::vector<float> wm(SC), wis(SC), wrm(SC, 0.0f), wrv(SC, 1.0f);
    for (int ch = 0; ch < SC; ch++) {
        double m, m2;
        hcnn_hd_bn_table_stats(table.data(), TN, SC, ch, TBANDS, TBAND_PX, TNP, &m, &m2);
        wm[ch] = (float)m;
        wis[ch] =
            hcnn_hd_bn_finish(m, m2, (double)TN * (double)TNP, eps, momentum, &wrm[ch], &wrv[ch]);
    }
    check_bits("save_mean", host(be, mean, SC), wm);
    check_bits("save_invstd", host(be, invstd, SC), wis);
    check_bits("running_mean", host(be, rmean, SC), wrm);
    check_bits("running_var", host(be, rvar, SC), wrv);
    for (float *p : {dtable, fx, fy, gamma, beta, mean, invstd, rmean, rvar})
        be->free(be, p);
    /* the planes' kernels and the channels' together, with a tail after the
     * 16 lanes (a warp a plane) and without (half a warp a plane) */
    plane_sums_bits(be, 20, 0);
    plane_sums_bits(be, 32, 0);
    /* pieces of 140 images (two staging rounds) and 10 */
    plane_sums_bits(be, 32, 140);
}

/* bn_apply and bwd_dx four elements a thread (bn.cu's bn_apply4, bwd_dx4:
 * NCHW planes of a multiple of 4; NHWC: channels a multiple of 4) give the
 * bits of a thread an element (the same tensors one float off 16-byte
 * alignment take those kernels), through the fused addition and ReLU; so
 * does inference (bn_apply from the running statistics the forward left) */
static void quads_match_elements(const hcnn_backend *be, int np) {
    const char *four = "bn_apply4_kernel", *dx4 = "bwd_dx4_kernel";
    enum { QN = 6, QC = 8 };
    const size_t total = (size_t)QN * QC * np;
    const std::vector<float> x = uniform(total, -2.0f, 2.0f, 21),
                             dy = uniform(total, -1.0f, 1.0f, 22),
                             add = uniform(total, -1.0f, 1.0f, 23),
                             gamma = uniform(QC, 0.5f, 1.5f, 24),
                             beta = uniform(QC, -0.2f, 0.2f, 25);
    std::vector<float> got[2][5];
    for (int off = 0; off < 2; off++) { /* 0: aligned, 1: one float past */
        auto at = [&](const std::vector<float> &v) {
            std::vector<float> h(total + 4, 0.0f);
            std::copy(v.begin(), v.end(), h.begin() + off);
            return dev_copy(be, h);
        };
        const std::vector<float> zc(QC, 0.0f), one(QC, 1.0f);
        const std::vector<float> zero(total, 0.0f);
        float *bx = at(x), *bdy = at(dy), *badd = at(add), *by = at(zero), *bdx = at(zero),
              *bi = at(zero), *g = dev_copy(be, gamma),
              *b = dev_copy(be, beta), *m = dev_copy(be, zc), *is = dev_copy(be, zc),
              *rm = dev_copy(be, zc), *rv = dev_copy(be, one), *dg = dev_copy(be, zc),
              *db = dev_copy(be, zc);
        const std::string fwd = joined(launches_of(be, [&] {
            be->bn_fwd_train(be, bx + off, QN, QC, np, g, b, 1e-5f, 0.1f, rm, rv, m, is,
                             badd + off, 1, nullptr, by + off);
        }));
        const std::string bwd = joined(launches_of(be, [&] {
            be->bn_bwd(be, bx + off, bdy + off, QN, QC, np, g, b, m, is, 1, bdx + off, dg, db);
        }));
        const std::string inf = joined(launches_of(be, [&] {
            be->bn_fwd_infer(be, bx + off, QN, QC, np, g, b, 1e-5f, rm, rv, badd + off, 1,
                             bi + off);
        }));
        const bool quads = fwd.find(four) != std::string::npos,
                   dquads = bwd.find(dx4) != std::string::npos,
                   iquads = inf.find(four) != std::string::npos;
        if (quads != (off == 0) || dquads != (off == 0) || iquads != (off == 0)) {
            printf("# %s alignment: launches %s / %s / %s\n", off ? "one float off" : "16-byte",
                   fwd.c_str(), bwd.c_str(), inf.c_str());
            ++case_failures;
        }
        const std::vector<float> yh = host(be, by, total + 4), dxh = host(be, bdx, total + 4);
        got[off][0].assign(yh.begin() + off, yh.begin() + off + (long)total);
        got[off][1].assign(dxh.begin() + off, dxh.begin() + off + (long)total);
        got[off][2] = host(be, dg, QC), got[off][3] = host(be, db, QC);
        const std::vector<float> ih = host(be, bi, total + 4);
        got[off][4].assign(ih.begin() + off, ih.begin() + off + (long)total);
        for (float *p : {bx, bdy, badd, by, bdx, bi, g, b, m, is, rm, rv, dg, db})
            be->free(be, p);
    }
    const char *names[] = {"y", "dx", "dgamma", "dbeta", "inference's y"};
    for (int k = 0; k < 5; k++)
        if (memcmp(got[0][k].data(), got[1][k].data(), got[0][k].size() * sizeof(float)) != 0) {
            printf("# %s: four elements a thread give other bits than one\n", names[k]);
            ++case_failures;
        }
}

static void test_quads_match_elements() {
    quads_match_elements(the_backend, 12); /* a quad within a plane */
    quads_match_elements(the_backend, 1);  /* planes of one pixel: 4 channels a quad */
}

static const hcnn_backend *the_nhwc_backend;

static void test_nhwc_quads_match_elements() {
    quads_match_elements(the_nhwc_backend, 12); /* 4 channels a quad */
}

/* [N][C][NP] -> [N][NP][C] (to 1), or back */
static std::vector<float> transposed(const std::vector<float> &v, int to) {
    std::vector<float> t(v.size());
    for (int i = 0; i < N; i++)
        for (int ch = 0; ch < C; ch++)
            for (int p = 0; p < NP; p++) {
                const size_t nchw = ((size_t)i * C + ch) * NP + p;
                const size_t nhwc = ((size_t)i * NP + p) * C + ch;
                if (to)
                    t[nhwc] = v[nchw];
                else
                    t[nchw] = v[nhwc];
            }
    return t;
}

static bn_io nhwc_inputs(const bn_io &io) {
    bn_io t = io;
    t.x = transposed(io.x, 1), t.dy = transposed(io.dy, 1), t.add = transposed(io.add, 1);
    return t;
}

static void infer(const bn_dev &d) {
    d.be->bn_fwd_infer(d.be, d.x, N, C, NP, d.gamma, d.beta, 1e-5f, d.rmean, d.rvar, d.add, 1,
                       d.dx);
}

/* forward: nhwc_block_stats, bn_channel.cu's bn_channel_stats, bn_apply; backward:
 * nhwc_bwd_block, bn_channel.cu's bwd_channel, bwd_dx: 3 launches and 2 passes over x
 * each (a block's second pass reads it from cache); inference: one.  The
 * statistics of a convolution (NCHW's table) are ignored: the same
 * launches and bits as without them */
static void test_nhwc_launches_per_call() {
    const hcnn_backend *be = the_nhwc_backend;
    const bn_io io = nhwc_inputs(make_inputs());
    const bn_dev d = dev_setup(be, io), s = dev_setup(be, io);
    CHECK_LAUNCHES(launches_of(be, [&] { forward(d, nullptr); }),
                   "nhwc_block_stats_kernel bn_channel_stats_kernel bn_apply_kernel");
    CHECK_LAUNCHES(launches_of(be, [&] { backward(d); }),
                   "nhwc_bwd_block_kernel bwd_channel_kernel bwd_dx_kernel");
    CHECK_LAUNCHES(launches_of(be, [&] { infer(d); }), "bn_apply_kernel");
    hcnn_bn_stats stats = {};
    stats.cap = TOTAL;
    stats.part = (float *)be->alloc(be, stats.cap * sizeof(float), "statistics table");
    CHECK_LAUNCHES(launches_of(be, [&] { hcnn_cuda_bn_gather(be, s.x, N, C, NP, &stats); }), "");
    CHECK(stats.bands == 0);
    stats.bands = 1, stats.band_px = NP; /* as if gathered: ignored all the same */
    CHECK_LAUNCHES(launches_of(be, [&] { forward(s, &stats); }),
                   "nhwc_block_stats_kernel bn_channel_stats_kernel bn_apply_kernel");
    const auto a = results(d), b = results(s);
    for (size_t k : {0, 2, 3, 4, 5})
        if (memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0) {
            printf("# %s: the forward with statistics given gives other bits\n", result_names[k]);
            ++case_failures;
        }
    be->free(be, stats.part);
    dev_free(d), dev_free(s);
}

/* the largest difference of a and b relative to max(1, |a|) */
static double worst_of(const std::vector<float> &a, const std::vector<float> &b) {
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        const double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)a[i]));
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* The forward, backward and inference of NHWC against NCHW's, transposed
 * back on the host: other block sums (row blocks, not planes), so not the
 * same bits, but within a few float roundings (|x| <= 16: 2e-6, y 1e-5;
 * the backward and inference from NCHW's statistics, so that only their
 * own sums differ); also with a scratch that holds a single block of rows
 * (larger blocks, the same launches) */
static void test_nhwc_matches_nchw() {
    const bn_io io = make_inputs();
    const bn_dev ref = dev_setup(the_backend, io);
    forward(ref, nullptr), backward(ref);
    const auto a = results(ref);
    infer(ref); /* into dx, after the results */
    const std::vector<float> inf = host(the_backend, ref.dx, TOTAL);
    hcnn_cuda *cu = cuda_of(the_nhwc_backend);
    const size_t keep = cu->scratch_doubles;
    for (int small = 0; small < 2; small++) {
        const hcnn_backend *be = the_nhwc_backend;
        const bn_dev d = dev_setup(be, nhwc_inputs(io));
        if (small) /* the two means and one block's pairs: one block of 400 rows */
            cu->scratch_doubles = 2 * (size_t)C;
        CHECK_LAUNCHES(launches_of(be, [&] { forward(d, nullptr); }),
                       "nhwc_block_stats_kernel bn_channel_stats_kernel bn_apply_kernel");
        CHECK_LAUNCHES(launches_of(be, [&] { backward(d); }),
                       "nhwc_bwd_block_kernel bwd_channel_kernel bwd_dx_kernel");
        auto b = results(d);
        /* the backward again from NCHW's statistics: its own sums' differences only */
        be->upload(be, d.mean, a[2].data(), C * sizeof(float));
        be->upload(be, d.invstd, a[3].data(), C * sizeof(float));
        be->upload(be, d.rmean, a[4].data(), C * sizeof(float));
        be->upload(be, d.rvar, a[5].data(), C * sizeof(float));
        const std::vector<float> zc(C, 0.0f);
        be->upload(be, d.dgamma, zc.data(), C * sizeof(float));
        be->upload(be, d.dbeta, zc.data(), C * sizeof(float));
        if (small)
            cu->scratch_doubles = 2 * (size_t)C;
        backward(d);
        cu->scratch_doubles = keep;
        const auto c = results(d);
        b[1] = c[1], b[6] = c[6], b[7] = c[7];
        b[0] = transposed(b[0], 0), b[1] = transposed(b[1], 0);
        for (size_t k = 0; k < 8; k++) { /* not the channel sum: NCHW's only */
            const double worst = worst_of(a[k], b[k]);
            /* the statistics agree within 1e-7; y = x a + b, b = beta - mean a,
             * carries their difference times |mean| / std (up to 26 here) */
            if (worst > (k == 0 ? 5e-6 : 1e-6) * 2) {
                printf("# %s%s: NHWC %.2e from NCHW (relative)\n", result_names[k],
                       small ? " (one block)" : "", worst);
                ++case_failures;
            }
        }
        infer(d); /* from NCHW's running statistics, uploaded above */
        const double worst = worst_of(inf, transposed(host(be, d.dx, TOTAL), 0));
        if (worst != 0.0) { /* element by element: the same operations */
            printf("# inference: NHWC %.2e from NCHW\n", worst);
            ++case_failures;
        }
        dev_free(d);
    }
    dev_free(ref);
}

/* two forwards and backwards from the same inputs: the same bits */
static void test_nhwc_repeatable() {
    const hcnn_backend *be = the_nhwc_backend;
    const bn_io io = nhwc_inputs(make_inputs());
    const bn_dev one = dev_setup(be, io), two = dev_setup(be, io);
    forward(one, nullptr), backward(one);
    forward(two, nullptr), backward(two);
    const auto a = results(one), b = results(two);
    for (size_t k = 0; k < 8; k++)
        if (memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0) {
            printf("# %s: a second run gives other bits\n", result_names[k]);
            ++case_failures;
        }
    dev_free(one), dev_free(two);
}

/* The NHWC forward's statistics against the host's in bn_nhwc.cu's order,
 * bit for bit: each block of HCNN_CUDA_NHWC_ROWS rows' pair of a channel as
 * a plane's (16 lanes and a tail), the blocks as the bands of one plane
 * (hd.h's table statistics).  SN images of 15x15: 33750 rows, 132 blocks
 * (more than bn_channel.cu stages at once; the last of 214 rows, a tail
 * of 6), SC channels (two channel blocks) */
static void test_nhwc_statistics_bits() {
    const hcnn_backend *be = the_nhwc_backend;
    const int np = 225, rows = SN * np, per = HCNN_CUDA_NHWC_ROWS;
    const int blocks = (rows + per - 1) / per;
    const std::vector<float> x = uniform((size_t)rows * SC, -3.0f, 5.0f, 777);
    const std::vector<float> zc(SC, 0.0f), one(SC, 1.0f), g = uniform(SC, 0.5f, 1.5f, 3);
    float *xd = dev_copy(be, x), *y = dev_copy(be, x), *gamma = dev_copy(be, g),
          *beta = dev_copy(be, zc), *mean = dev_copy(be, zc), *invstd = dev_copy(be, zc),
          *rmean = dev_copy(be, zc), *rvar = dev_copy(be, one);
    CHECK_LAUNCHES(launches_of(be, [&] {
                       be->bn_fwd_train(be, xd, SN, SC, np, gamma, beta, 1e-5f, 0.1f, rmean, rvar,
                                        mean, invstd, nullptr, 0, nullptr, y);
                   }),
                   "nhwc_block_stats_kernel bn_channel_stats_kernel bn_apply4_kernel");
    /* hd.h's table: one image of `blocks` bands, [channel][band] */
    std::vector<float> table(2 * (size_t)SC * blocks), vals(per), wm(SC), wis(SC), wrm(SC, 0.0f),
        wrv(SC, 1.0f);
    for (int ch = 0; ch < SC; ch++) {
        for (int b = 0; b < blocks; b++) {
            const int r0 = b * per, cnt = rows - r0 < per ? rows - r0 : per;
            for (int i = 0; i < cnt; i++)
                vals[i] = x[(size_t)(r0 + i) * SC + ch];
            const size_t at = hcnn_hd_bn_piece_at(b, SC, ch, blocks);
            plane_pair(vals.data(), cnt, &table[at], &table[at + 1]);
        }
        double mu, m2;
        hcnn_hd_bn_table_stats(table.data(), 1, SC, ch, blocks, per, rows, &mu, &m2);
        wm[ch] = (float)mu;
        wis[ch] = hcnn_hd_bn_finish(mu, m2, (double)rows, 1e-5f, 0.1f, &wrm[ch], &wrv[ch]);
    }
    printf("# NHWC: %d rows of %d channels, %d blocks of %d rows\n", rows, SC, blocks, per);
    check_bits("NHWC save_mean", host(be, mean, SC), wm);
    check_bits("NHWC save_invstd", host(be, invstd, SC), wis);
    check_bits("NHWC running_mean", host(be, rmean, SC), wrm);
    check_bits("NHWC running_var", host(be, rvar, SC), wrv);
    for (float *p : {xd, y, gamma, beta, mean, invstd, rmean, rvar})
        be->free(be, p);
}

static const test_case cases[] = {
    {"launches_per_call", test_launches_per_call},
    {"gathered_statistics", test_gathered_statistics},
    {"pieces", test_pieces},
    {"channel_sums_bits", test_channel_sums_bits},
    {"quads_match_elements", test_quads_match_elements},
    {"nhwc_launches_per_call", test_nhwc_launches_per_call},
    {"nhwc_matches_nchw", test_nhwc_matches_nchw},
    {"nhwc_repeatable", test_nhwc_repeatable},
    {"nhwc_statistics_bits", test_nhwc_statistics_bits},
    {"nhwc_quads_match_elements", test_nhwc_quads_match_elements},
};

int main() {
    setenv("HCNN_EMU_DEVICE_MB", "256", 1); /* before the first call maps the arena */
    hcnn_backend *be = nullptr;
    if (hcnn_backend_create("cuda", 0, &be) != HCNN_OK) {
        printf("# the cuda backend does not start (its message above)\n");
        return 1;
    }
    the_backend = be;
    /* a second instance in NHWC (HCNN_CUDA_LAYOUT, read at creation), the
     * variable restored after */
    const char *was = getenv("HCNN_CUDA_LAYOUT");
    const std::string saved = was ? was : "";
    setenv("HCNN_CUDA_LAYOUT", "nhwc", 1);
    hcnn_backend *nhwc = nullptr;
    const int st = hcnn_backend_create("cuda", 0, &nhwc);
    if (was)
        setenv("HCNN_CUDA_LAYOUT", saved.c_str(), 1);
    else
        unsetenv("HCNN_CUDA_LAYOUT");
    if (st != HCNN_OK || nhwc->layout != HCNN_LAYOUT_NHWC) {
        printf("# the cuda backend does not start in NHWC\n");
        hcnn_backend_destroy(be);
        return 1;
    }
    the_nhwc_backend = nhwc;
    const int rc = run_cases(cases, sizeof cases / sizeof *cases);
    hcnn_backend_destroy(nhwc);
    hcnn_backend_destroy(be);
    return rc;
}
