/* Fuzz target: NumPy import (src/io/export.c, hcnn_import_npy) of the
 * small model of tiny.yaml.
 *
 * A directory holds a valid export of the model (written at start-up by
 * hcnn_export_npy); input byte 0 picks one of the model's tensors and the
 * rest of the input replaces its .npy file for this run (restored after).
 * An import that succeeds must write a checkpoint that hcnn_ckpt_load
 * accepts, with finite values only (NaN and Inf are refused on import). */
#include "fuzz_common.h"

#include <math.h>

#include "hcnn/checkpoint.h"
#include "hcnn/export.h"
#include "fuzz_tiny.h"

#define MAXT 16
static hcnn_config fuzz_cfg;
static hcnn_net fuzz_net, fuzz_check;
static char fuzz_exp[300], fuzz_out[300], fuzz_file[MAXT][400];
static unsigned char *fuzz_orig[MAXT];
static size_t fuzz_orig_len[MAXT];

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        abort();
    unsigned char *buf = malloc(1 << 16);
    if (!buf)
        abort();
    *n = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_tiny_net(&fuzz_cfg, &fuzz_net);
    fuzz_tiny_net(&fuzz_cfg, &fuzz_check);
    if (fuzz_net.ntensors > MAXT)
        abort();
    char ckpt[300];
    fuzz_path(ckpt, sizeof ckpt, "seed.hcnn");
    fuzz_path(fuzz_exp, sizeof fuzz_exp, "exp");
    fuzz_path(fuzz_out, sizeof fuzz_out, "out.hcnn");
    for (size_t i = 0; i < fuzz_net.nparams; i++)
        fuzz_net.params[i] = (float)i / 16.0f - 1.0f;
    for (size_t i = 0; i < fuzz_net.nstate; i++)
        fuzz_net.state[i] = 1.0f + (float)i;
    hcnn_ckpt_meta meta = {.epoch = 1, .step = 4, .seed = 5};
    snprintf(meta.model, sizeof meta.model, "%s", fuzz_cfg.model.name);
    if (hcnn_ckpt_save(ckpt, &fuzz_net, NULL, &meta) != HCNN_OK ||
        hcnn_export_npy(ckpt, fuzz_exp) != HCNN_OK)
        abort();
    unlink(ckpt);
    for (int i = 0; i < fuzz_net.ntensors; i++) {
        snprintf(fuzz_file[i], sizeof fuzz_file[i], "%s/%s.npy", fuzz_exp, fuzz_net.tensors[i].name);
        fuzz_orig[i] = slurp(fuzz_file[i], &fuzz_orig_len[i]);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int k = data[0] % fuzz_net.ntensors;
    fuzz_write(fuzz_file[k], data + 1, size - 1);
    int rc = hcnn_import_npy(fuzz_exp, &fuzz_cfg, fuzz_out);
    fuzz_write(fuzz_file[k], fuzz_orig[k], fuzz_orig_len[k]);
    if (rc == HCNN_OK) {
        hcnn_ckpt_meta meta;
        if (hcnn_ckpt_load(fuzz_out, &fuzz_check, NULL, &meta) != HCNN_OK) {
            fprintf(stderr, "fuzz_import: the imported checkpoint does not load\n");
            abort();
        }
        for (size_t i = 0; i < fuzz_check.nparams; i++)
            if (!isfinite(fuzz_check.params[i])) {
                fprintf(stderr, "fuzz_import: parameter %zu is not finite but was imported\n", i);
                abort();
            }
        for (size_t i = 0; i < fuzz_check.nstate; i++)
            if (!isfinite(fuzz_check.state[i])) {
                fprintf(stderr, "fuzz_import: statistic %zu is not finite but was imported\n", i);
                abort();
            }
        unlink(fuzz_out);
    }
    return 0;
}
