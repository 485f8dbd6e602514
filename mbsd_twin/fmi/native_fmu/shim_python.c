/* Where the host-independent FMU finds the worker's Python interpreter (see shim_python.h), in order:

   1. the environment variable MBSD_TWIN_FMU_PYTHON (an executable file);
   2. the interpreter recorded at build time, the first line of resources/mbsd_twin_python.txt (an
      executable file);
   3. the first `python3` on PATH that can `import mbsd_twin` (checked by running it: the FMU was
      moved to another machine or the build's environment is gone).

   The first that works is used (a warning says why the ones before it were passed over); when
   none does, the message says why for each of the three. */
#define _GNU_SOURCE
#include "shim_python.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int core_read_line(const char *res, const char *file, char *buf, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", res, file);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)n, f)) { if (f) fclose(f); return -1; }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    return *buf ? 0 : -1;
}

/* Whether `python -c "import mbsd_twin"` exits 0 (its output discarded). */
static int imports_mbsd_twin(const char *python) {
    char *argv[] = {(char *)python, "-c", "import mbsd_twin", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none;
    pid_t pid;
    int st = 0, ok = 0;
    sigemptyset(&none);
    if (posix_spawn_file_actions_init(&fa)) return 0;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    if (!posix_spawn(&pid, python, &fa, &attr, argv, environ)) {
        pid_t r;
        do { r = waitpid(pid, &st, 0); } while (r < 0 && errno == EINTR);
        ok = r == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return ok;
}

/* The first python3 on PATH that imports mbsd_twin; `tried` lists the others. */
static int python_on_path(char *python, size_t n, char *tried, size_t n_tried) {
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : ""), *save = NULL;
    int found = 0;
    *tried = '\0';
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char cand[4096];
        snprintf(cand, sizeof cand, "%s/python3", *dir ? dir : ".");
        if (access(cand, X_OK)) continue;
        if (imports_mbsd_twin(cand)) { snprintf(python, n, "%s", cand); found = 1; continue; }
        size_t used = strlen(tried);
        snprintf(tried + used, n_tried - used, "%s%.1000s", used ? ", " : "", cand);
    }
    free(copy);
    return found ? 0 : -1;
}

int core_find_python(const char *res, char *python, size_t n, char *origin, size_t n_origin, char *why,
                     size_t n_why) {
    char env_why[4200], file_why[4200], path_why[2048], tried[1024];
    const char *env = getenv(PYTHON_ENV);
    *why = '\0';
    if (env && *env && !access(env, X_OK)) {
        snprintf(python, n, "%s", env);
        snprintf(origin, n_origin, "interpreter from $%s:", PYTHON_ENV);
        return 0;
    }
    if (env && *env) snprintf(env_why, sizeof env_why, "$%s is %s, not an executable file", PYTHON_ENV, env);
    else snprintf(env_why, sizeof env_why, "$%s is not set", PYTHON_ENV);
    if (!core_read_line(res, PYTHON_FILE, python, n)) {
        if (!access(python, X_OK)) {
            snprintf(origin, n_origin, "interpreter recorded in resources/%s:", PYTHON_FILE);
            if (env && *env) snprintf(why, n_why, "%s", env_why);
            return env && *env ? 1 : 0;
        }
        snprintf(file_why, sizeof file_why, "resources/%s records %s, not an executable file", PYTHON_FILE, python);
    } else snprintf(file_why, sizeof file_why, "resources/%s is missing or empty", PYTHON_FILE);
    if (!python_on_path(python, n, tried, sizeof tried)) {
        snprintf(origin, n_origin, "python3 found on PATH:");
        snprintf(why, n_why, "%s; %s", env_why, file_why);
        return 1;
    }
    if (*tried) snprintf(path_why, sizeof path_why, "no python3 on PATH can import mbsd_twin (tried %s)", tried);
    else snprintf(path_why, sizeof path_why, "there is no python3 on PATH (%.1500s)", getenv("PATH") ? getenv("PATH") : "");
    snprintf(why, n_why, "1. %s; 2. %s; 3. %s", env_why, file_why, path_why);
    return -1;
}
