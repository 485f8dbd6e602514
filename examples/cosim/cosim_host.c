/* A plain C co-simulation master for an unpacked SSP (no Python in this process).

   cosim_host SSP_DIR OUT.csv

   SSP_DIR is a .ssp unpacked with every FMU unpacked next to itself (resources/X.fmu ->
   resources/X/, cosim_build.extract_ssp). The host reads SSP_DIR/SystemStructure.ssd: the
   components (name, source), their Real parameter values (inline ssv:ParameterSet), the
   connections, the stop time (ssd:DefaultExperiment) and the communication step (OSP's
   osp:FixedStepAlgorithm baseStepSize annotation). It reads each FMU's guid, modelIdentifier and
   value references from its modelDescription.xml and dlopen()s binaries/linux64/<id>.so.

   The subset of XML understood: attributes in double quotes, no entities, no CDATA, comments
   not containing tags; Real connectors only, no linear transformations, no .ssv files. Enough for
   the files cosim_build.py writes; not a general SSP importer.

   Master algorithm, the one of libcosim's fixed_step_algorithm (Jacobi): every FMU steps from t
   to t + h with the inputs set before the step; then every connection's output is read and the
   connected input set, for the next step. Time is counted in integer nanoseconds like libcosim's:
   step k goes from t_k = k*h_ns / 1e9 by t_{k+1} - t_k (libcosim's to_double_duration).
   Initialisation like libcosim's: parameters set after instantiation, then in initialisation mode
   as many transfer rounds as there are components, then fmi2ExitInitializationMode and one more
   transfer.

   OUT.csv: time, then the value of every connection (named by its output, component.variable)
   after each step. */
#include <ctype.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmi2Functions.h"

#define MAX_COMP 8
#define MAX_CONN 32
#define MAX_TEXT 512

typedef struct {
    char name[64], dir[MAX_TEXT], *md;
    void *lib;
    fmi2Component c;
    fmi2InstantiateTYPE *Instantiate;
    fmi2SetupExperimentTYPE *SetupExperiment;
    fmi2EnterInitializationModeTYPE *EnterInitializationMode;
    fmi2ExitInitializationModeTYPE *ExitInitializationMode;
    fmi2SetRealTYPE *SetReal;
    fmi2GetRealTYPE *GetReal;
    fmi2DoStepTYPE *DoStep;
    fmi2TerminateTYPE *Terminate;
    fmi2FreeInstanceTYPE *FreeInstance;
} Comp;

typedef struct {
    int from, to;
    fmi2ValueReference out_vr, in_vr;
    char label[160];
    double value;
} Conn;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cosim_host: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) die("cannot read %s", path);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* The next start tag <tag ...> at or after p, before end (NULL: to the end of the text). */
static const char *next_tag(const char *p, const char *end, const char *tag) {
    size_t n = strlen(tag);
    for (const char *q = p; (q = strstr(q, "<")) != NULL && (!end || q < end); q++)
        if (strncmp(q + 1, tag, n) == 0 && strchr(" \t\r\n/>", q[1 + n])) return q;
    return NULL;
}

/* Attribute `name` of the tag at `tag` copied into out (size MAX_TEXT); 0 when absent. */
static int attr(const char *tag, const char *name, char *out) {
    const char *close = strchr(tag, '>');
    size_t n = strlen(name);
    for (const char *q = tag; (q = strstr(q, name)) != NULL && q < close; q += n) {
        if (!strchr(" \t\r\n", q[-1]) || strncmp(q + n, "=\"", 2) != 0) continue;
        const char *v = q + n + 2, *stop = strchr(v, '"');
        if (!stop || stop - v >= MAX_TEXT) return 0;
        memcpy(out, v, (size_t)(stop - v));
        out[stop - v] = '\0';
        return 1;
    }
    return 0;
}

/* snprintf that refuses to truncate */
static void format(char *out, size_t size, const char *fmt, const char *a, const char *b) {
    if ((size_t)snprintf(out, size, fmt, a, b) >= size) die("text too long: %s %s", a, b);
}

static void need_attr(const char *tag, const char *name, char *out) {
    if (!tag || !attr(tag, name, out)) die("missing attribute %s", name);
}

static fmi2ValueReference value_reference(const Comp *c, const char *variable) {
    char name[MAX_TEXT], vr[MAX_TEXT];
    for (const char *sv = c->md; (sv = next_tag(sv, NULL, "ScalarVariable")) != NULL; sv++)
        if (attr(sv, "name", name) && strcmp(name, variable) == 0) {
            need_attr(sv, "valueReference", vr);
            return (fmi2ValueReference)strtoul(vr, NULL, 10);
        }
    die("%s has no variable %s", c->name, variable);
    return 0;
}

static void logger(fmi2ComponentEnvironment env, fmi2String name, fmi2Status status, fmi2String category,
                   fmi2String message, ...) {
    (void)env;
    va_list ap;
    va_start(ap, message);
    fprintf(stderr, "[%s %d %s] ", name, (int)status, category);
    vfprintf(stderr, message, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *symbol(Comp *c, const char *name) {
    void *f = dlsym(c->lib, name);
    if (!f) die("%s: missing %s", c->name, name);
    return f;
}

/* file:// URI of a path, every byte outside [A-Za-z0-9/._~-] percent-escaped. */
static void file_uri(const char *path, char *out, size_t size) {
    size_t k = (size_t)snprintf(out, size, "file://");
    for (const unsigned char *p = (const unsigned char *)path; *p && k + 4 < size; p++)
        k += (size_t)(strchr("/._~-", *p) || (*p < 128 && isalnum(*p)) ? snprintf(out + k, size - k, "%c", *p)
                                                                       : snprintf(out + k, size - k, "%%%02X", *p));
}

static void load_component(Comp *c, const char *ssp_dir, const char *tag) {
    char source[MAX_TEXT], path[2 * MAX_TEXT], guid[MAX_TEXT], ident[MAX_TEXT], uri[4 * MAX_TEXT];
    need_attr(tag, "name", c->name);
    need_attr(tag, "source", source);
    char *dot = strstr(source, ".fmu");
    if (dot) *dot = '\0';
    format(c->dir, sizeof c->dir, "%s/%s", ssp_dir, source);
    format(path, sizeof path, "%s/%s", c->dir, "modelDescription.xml");
    c->md = read_file(path);
    need_attr(next_tag(c->md, NULL, "fmiModelDescription"), "guid", guid);
    need_attr(next_tag(c->md, NULL, "CoSimulation"), "modelIdentifier", ident);
    format(path, sizeof path, "%s/binaries/linux64/%s.so", c->dir, ident);
    if (!(c->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) die("dlopen: %s", dlerror());
    c->Instantiate = symbol(c, "fmi2Instantiate");
    c->SetupExperiment = symbol(c, "fmi2SetupExperiment");
    c->EnterInitializationMode = symbol(c, "fmi2EnterInitializationMode");
    c->ExitInitializationMode = symbol(c, "fmi2ExitInitializationMode");
    c->SetReal = symbol(c, "fmi2SetReal");
    c->GetReal = symbol(c, "fmi2GetReal");
    c->DoStep = symbol(c, "fmi2DoStep");
    c->Terminate = symbol(c, "fmi2Terminate");
    c->FreeInstance = symbol(c, "fmi2FreeInstance");
    static fmi2CallbackFunctions cb = {logger, calloc, free, NULL, NULL};
    format(path, sizeof path, "%s/%s", c->dir, "resources");
    file_uri(path, uri, sizeof uri);
    c->c = c->Instantiate(c->name, fmi2CoSimulation, guid, uri, &cb, fmi2False, fmi2False);
    if (!c->c) die("fmi2Instantiate of %s returned NULL", c->name);
}

/* The component's inline Real parameter values, set in the instantiated state. */
static void set_parameters(Comp *c, const char *tag) {
    const char *end = strstr(tag, "</ssd:Component>"), *next = next_tag(tag + 1, NULL, "ssd:Component");
    if (!end || (next && next < end)) end = next;  /* a self-closing component has no parameters */
    char name[MAX_TEXT], value[MAX_TEXT];
    for (const char *p = tag; (p = next_tag(p, end, "ssv:Parameter")) != NULL; p++) {
        need_attr(p, "name", name);
        need_attr(next_tag(p, end, "ssv:Real"), "value", value);
        fmi2ValueReference vr = value_reference(c, name);
        double v = strtod(value, NULL);
        if (c->SetReal(c->c, &vr, 1, &v) != fmi2OK) die("%s: setting %s failed", c->name, name);
    }
}

static int component_index(const Comp *cs, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(cs[k].name, name) == 0) return k;
    die("no component %s", name);
    return -1;
}

static int load_connections(const char *ssd, Comp *cs, int n_comp, Conn *cn) {
    char se[MAX_TEXT], sc[MAX_TEXT], ee[MAX_TEXT], ec[MAX_TEXT];
    int n = 0;
    for (const char *p = ssd; (p = next_tag(p, NULL, "ssd:Connection")) != NULL && n < MAX_CONN; p++, n++) {
        need_attr(p, "startElement", se); need_attr(p, "startConnector", sc);
        need_attr(p, "endElement", ee); need_attr(p, "endConnector", ec);
        cn[n].from = component_index(cs, n_comp, se);
        cn[n].to = component_index(cs, n_comp, ee);
        cn[n].out_vr = value_reference(&cs[cn[n].from], sc);
        cn[n].in_vr = value_reference(&cs[cn[n].to], ec);
        format(cn[n].label, sizeof cn[n].label, "%s.%s", se, sc);
    }
    return n;
}

/* Read every connection's output, then set every connected input (Jacobi: nothing steps between). */
static void transfer(Comp *cs, Conn *cn, int n) {
    for (int k = 0; k < n; k++)
        if (cs[cn[k].from].GetReal(cs[cn[k].from].c, &cn[k].out_vr, 1, &cn[k].value) != fmi2OK)
            die("fmi2GetReal of %s failed", cn[k].label);
    for (int k = 0; k < n; k++)
        if (cs[cn[k].to].SetReal(cs[cn[k].to].c, &cn[k].in_vr, 1, &cn[k].value) != fmi2OK)
            die("fmi2SetReal from %s failed", cn[k].label);
}

static void initialize(Comp *cs, int n_comp, Conn *cn, int n_conn, double stop) {
    for (int k = 0; k < n_comp; k++)
        if (cs[k].SetupExperiment(cs[k].c, fmi2False, 0.0, 0.0, fmi2True, stop) != fmi2OK
            || cs[k].EnterInitializationMode(cs[k].c) != fmi2OK) die("initialising %s failed", cs[k].name);
    for (int round = 0; round < n_comp; round++) transfer(cs, cn, n_conn);
    for (int k = 0; k < n_comp; k++)
        if (cs[k].ExitInitializationMode(cs[k].c) != fmi2OK) die("fmi2ExitInitializationMode of %s failed", cs[k].name);
    transfer(cs, cn, n_conn);
}

static void run(Comp *cs, int n_comp, Conn *cn, int n_conn, double stop, int64_t h_ns, FILE *out) {
    fprintf(out, "time");
    for (int k = 0; k < n_conn; k++) fprintf(out, ",%s", cn[k].label);
    fputc('\n', out);
    int64_t n_steps = (int64_t)(stop / ((double)h_ns / 1e9) + 0.5);
    for (int64_t step = 0; step < n_steps; step++) {
        double t = (double)(step * h_ns) / 1e9, h = (double)((step + 1) * h_ns) / 1e9 - t;
        for (int k = 0; k < n_comp; k++)
            if (cs[k].DoStep(cs[k].c, t, h, fmi2True) != fmi2OK) die("fmi2DoStep of %s at t=%g failed", cs[k].name, t);
        transfer(cs, cn, n_conn);
        fprintf(out, "%.17g", (double)((step + 1) * h_ns) / 1e9);
        for (int k = 0; k < n_conn; k++) fprintf(out, ",%.17g", cn[k].value);
        fputc('\n', out);
    }
}

/* What this host does not implement is refused, not ignored. */
static void refuse_unsupported(const char *ssd) {
    char source[MAX_TEXT];
    if (next_tag(ssd, NULL, "ssc:LinearTransformation"))
        die("connections with a linear transformation are not supported");
    for (const char *p = ssd; (p = next_tag(p, NULL, "ssd:ParameterBinding")) != NULL; p++)
        if (attr(p, "source", source)) die("parameter files (ParameterBinding source=%s) are not supported", source);
}

int main(int argc, char **argv) {
    if (argc != 3) die("usage: cosim_host SSP_DIR OUT.csv");
    char path[MAX_TEXT + 32], value[MAX_TEXT];
    format(path, sizeof path, "%s/%s", argv[1], "SystemStructure.ssd");
    char *ssd = read_file(path);
    refuse_unsupported(ssd);
    Comp cs[MAX_COMP] = {0};
    Conn cn[MAX_CONN] = {0};
    int n_comp = 0;
    for (const char *p = ssd; (p = next_tag(p, NULL, "ssd:Component")) != NULL && n_comp < MAX_COMP; p++, n_comp++) {
        load_component(&cs[n_comp], argv[1], p);
        set_parameters(&cs[n_comp], p);
    }
    int n_conn = load_connections(ssd, cs, n_comp, cn);
    need_attr(next_tag(ssd, NULL, "ssd:DefaultExperiment"), "stopTime", value);
    double stop = strtod(value, NULL);
    need_attr(next_tag(ssd, NULL, "osp:FixedStepAlgorithm"), "baseStepSize", value);
    int64_t h_ns = (int64_t)(strtod(value, NULL) * 1e9 + 0.5);
    FILE *out = fopen(argv[2], "w");
    if (!out) die("cannot write %s", argv[2]);
    initialize(cs, n_comp, cn, n_conn, stop);
    run(cs, n_comp, cn, n_conn, stop, h_ns, out);
    fclose(out);
    for (int k = 0; k < n_comp; k++) {
        cs[k].Terminate(cs[k].c);
        cs[k].FreeInstance(cs[k].c);
    }
    fprintf(stderr, "cosim_host: %d components, %d connections, %lld steps of %lld ns (Jacobi)\n", n_comp, n_conn,
            (long long)(stop / ((double)h_ns / 1e9) + 0.5), (long long)h_ns);
    return 0;
}
