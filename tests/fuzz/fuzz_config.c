/* Fuzz target: configurations (src/config/: libyaml -> tree, --set
 * overrides, schema), hcnn_config_load(cfg, path, sets, nset).
 *
 * Input: the YAML file up to the first NUL byte; each further NUL-separated
 * string is a `--set key=value` override (at most 8).  A load that
 * succeeds must survive the writer's round trip: hcnn_config_write, load
 * again, and the printed configurations are identical (the writer's
 * promise "write -> load is exact").  The YAML parse is quadratic in the
 * number of keys: run.sh caps the input length (-max_len) so that this
 * known cost does not show up as hangs. */
#include "fuzz_common.h"

#include "hcnn/common.h"
#include "hcnn/config.h"

#define MAXSETS 8
static char fuzz_yaml[300], fuzz_back[300];
static hcnn_config fuzz_a, fuzz_b;
static char *fuzz_buf;
static size_t fuzz_cap;

/* The printed configuration without its first line (which names the file). */
static char *printed(const hcnn_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        abort();
    hcnn_config_print(cfg, f);
    if (fclose(f) != 0)
        abort();
    char *nl = strchr(text, '\n');
    memmove(text, nl ? nl + 1 : text, strlen(nl ? nl + 1 : text) + 1);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_yaml[0]) {
        fuzz_path(fuzz_yaml, sizeof fuzz_yaml, "config.yaml");
        fuzz_path(fuzz_back, sizeof fuzz_back, "written.yaml");
    }
    if (size + 1 > fuzz_cap) {
        free(fuzz_buf);
        fuzz_cap = size + 1;
        if (!(fuzz_buf = malloc(fuzz_cap)))
            abort();
    }
    memcpy(fuzz_buf, data, size);
    fuzz_buf[size] = '\0';
    size_t ylen = strlen(fuzz_buf);
    fuzz_write(fuzz_yaml, fuzz_buf, ylen);
    const char *sets[MAXSETS];
    int nset = 0;
    for (size_t at = ylen + 1; at < size + 1 && nset < MAXSETS; at += strlen(fuzz_buf + at) + 1)
        sets[nset++] = fuzz_buf + at;

    if (hcnn_config_load(&fuzz_a, fuzz_yaml, sets, nset) != HCNN_OK)
        return 0;
    if (hcnn_config_write(&fuzz_a, fuzz_back) != HCNN_OK)
        abort();
    if (hcnn_config_load(&fuzz_b, fuzz_back, NULL, 0) != HCNN_OK) {
        fprintf(stderr, "fuzz_config: the written configuration does not load back\n");
        abort();
    }
    char *ta = printed(&fuzz_a), *tb = printed(&fuzz_b);
    if (strcmp(ta, tb) != 0) {
        fprintf(stderr, "fuzz_config: round trip changed the configuration:\n%s\n---\n%s\n", ta, tb);
        abort();
    }
    free(ta);
    free(tb);
    return 0;
}
