/* The fsync floor (bench/floor.py): an LD_PRELOAD library whose fsync and fdatasync call the real
 * ones and then sleep until at least FSYNC_FLOOR_MS milliseconds (default 2) have passed since the
 * call began, so every contender's durable write costs at least what a steady disk would, whatever
 * the neighbours of a shared machine do to this one's. A call slower than the floor is left as it was.
 *
 * Built at run time: gcc -shared -fPIC -O2 -o fsync_floor.so fsync_floor.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static long floor_ns = 2000000L;

__attribute__((constructor)) static void fsync_floor_init(void) {
    const char *ms = getenv("FSYNC_FLOOR_MS");
    if (ms && *ms)
        floor_ns = (long)(atof(ms) * 1e6);
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
}

static void hold_until_floor(const struct timespec *began) {
    struct timespec until = *began;
    until.tv_nsec += floor_ns % 1000000000L;
    until.tv_sec += floor_ns / 1000000000L + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}

int fsync(int fd) {
    struct timespec began;
    clock_gettime(CLOCK_MONOTONIC, &began);
    if (!real_fsync)
        real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int rc = real_fsync(fd);
    int saved = errno;
    hold_until_floor(&began);
    errno = saved;
    return rc;
}

int fdatasync(int fd) {
    struct timespec began;
    clock_gettime(CLOCK_MONOTONIC, &began);
    if (!real_fdatasync)
        real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int rc = real_fdatasync(fd);
    int saved = errno;
    hold_until_floor(&began);
    errno = saved;
    return rc;
}
