/*
 * libFuzzer harness for gpuslice-runtime's CDI edits applier
 * (runtime/apply.c, gs_rt_apply) on any config.json that Jansson reads:
 * every shape a container's author may give it, against a fixed cache
 * that offers edits of every kind. A refusal is one line; an applied
 * config is JSON again; nothing leaks or is read out of bounds.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../runtime/apply.h"
#include "one_line.h"
#include "util.h"

static const char CACHE[] =
    "{\"version\":1,\"trusted\":true,\"kind\":\"gpuslice.io/gpu\",\"specs\":["
    "{\"env\":[\"SPEC=1\"],\"mounts\":[{\"hostPath\":\"/l/a.so\",\"containerPath\":\"/usr/lib/a.so\","
    "\"options\":[\"ro\",\"bind\"]}]},{\"additionalGids\":[44]}],"
    "\"devices\":{"
    "\"gpuslice.io/gpu=0\":{\"spec\":0,\"edits\":{\"env\":[\"PATH=/x\",\"A=1\"],"
    "\"deviceNodes\":[{\"path\":\"/dev/nvidia0\",\"type\":\"c\",\"major\":195,\"minor\":0},"
    "{\"path\":\"/dev/null2\",\"hostPath\":\"/dev/null\",\"permissions\":\"rw\"},"
    "{\"path\":\"/dev/u\",\"type\":\"u\",\"major\":1,\"minor\":3,\"uid\":5,\"fileMode\":438}],"
    "\"hooks\":[{\"hookName\":\"createContainer\",\"path\":\"/bin/h\",\"args\":[\"h\"],"
    "\"timeout\":5},{\"hookName\":\"poststop\",\"path\":\"/bin/p\"}]}},"
    "\"gpuslice.io/gpu=0-4g\":{\"spec\":0,\"edits\":{\"mounts\":[{\"hostPath\":\"/r\","
    "\"containerPath\":\"/run/../run/gpuslice\",\"type\":\"bind\"},{\"hostPath\":\"/e\","
    "\"containerPath\":\"//etc/x/\"}],\"intelRdt\":{\"closID\":\"g\"}}},"
    "\"v.com/c=1\":{\"spec\":1,\"edits\":{\"netDevices\":[{\"hostInterfaceName\":\"eth9\","
    "\"name\":\"n0\"}],\"additionalGids\":[0,45,44]}}},"
    "\"conflicts\":{\"gpuslice.io/gpu=9\":[\"/etc/cdi/a.json\",\"/etc/cdi/b.json\"]},"
    "\"offers\":{\"gpuslice.io/gpu\":[\"0\",\"0-4g\"],\"v.com/c\":[\"1\"]},"
    "\"errors\":[\"/etc/cdi/bad.json: not valid\"]}";

static json_t *cache;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!cache) {
        cache = json_loads(CACHE, 0, NULL);
        if (!cache)
            abort();
    }
    json_t *config = json_loadb((const char *)data, size, 0, NULL);
    if (!config)
        return 0;
    int rc = gs_rt_apply(config, cache, stat);
    if (rc == GS_ERROR) {
        const char *m = gs_message();
        must_be_one_line(m, strlen(m));
    } else if (rc == GS_OK) {
        char *text = json_dumps(config, JSON_COMPACT);
        json_t *again = text ? json_loads(text, 0, NULL) : NULL;
        if (!again)
            abort();
        json_decref(again);
        free(text);
    } else if (rc != GS_NO) {
        abort();
    }
    json_decref(config);
    return 0;
}
