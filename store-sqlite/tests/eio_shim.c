/*
 * An LD_PRELOAD shim that makes file I/O fail with EIO, for tests/eio.rs.
 *
 * Only descriptors whose file lies under the directory named by
 * A2_EIO_DIR are touched (found with readlink of /proc/self/fd/N), and
 * only while the directory named by A2_EIO_CONTROL holds a file naming
 * the call's class, so a test switches faults on and off while its
 * process runs:
 *
 *   write  write, pwrite, pwrite64, ftruncate, ftruncate64
 *   read   read, pread, pread64
 *   sync   fsync, fdatasync
 *
 * A file named "<class>-<kind>" limits the fault to one kind of file:
 * "db" (the database), "wal" (a name ending in -wal), "shm" (-shm) or
 * "other". An empty control file fails every matching call; "N" lets N
 * matching calls through first, "N M" then fails M calls and lets the
 * rest through (the shim counts both down in the file). Every failure it
 * injects is logged as a line "<class> <kind>" to the file "log" in the
 * control directory. While a file "die" is there, the first fault
 * injected makes every later write and sync fail too (it creates the
 * control files "write" and "sync"): a disk that dies mid-commit.
 *
 * SQLite (rusqlite's bundled build) calls these through its table of
 * system calls, filled with the addresses of the libc functions; in a
 * dynamically linked test binary those resolve to this shim. The shim
 * does its own I/O and the real calls with syscall(2), never through the
 * functions it replaces.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Marks the shim as loaded: the test checks it with dlsym. */
int a2_eio_shim_loaded = 1;

static long raw_open(const char *path, int flags, int mode) {
  return syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

/* The kind of the file behind fd if it lies under A2_EIO_DIR, else NULL. */
static const char *watched_kind(int fd) {
  const char *dir = getenv("A2_EIO_DIR");
  if (dir == NULL || dir[0] == '\0') return NULL;
  char link[64];
  char path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return NULL;
  path[n] = '\0';
  size_t len = strlen(dir);
  if (strncmp(path, dir, len) != 0 || path[len] != '/') return NULL;
  size_t plen = (size_t)n;
  if (plen >= 4 && strcmp(path + plen - 4, "-wal") == 0) return "wal";
  if (plen >= 4 && strcmp(path + plen - 4, "-shm") == 0) return "shm";
  if (plen >= 3 && strcmp(path + plen - 3, ".db") == 0) return "db";
  return "other";
}

/* Whether a call matching the control file `file` fails. The file holds
 * "[pass [fail]]": let `pass` calls through (0 if missing), then fail
 * `fail` calls (every call if missing), then let every call through. The
 * shim counts both down in the file. No file: no fault. */
static int consume(const char *file) {
  long fd = raw_open(file, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return 0;
  char text[64];
  long got = syscall(SYS_pread64, fd, text, sizeof text - 1, 0L);
  if (got < 0) got = 0;
  text[got] = '\0';
  char *end = NULL;
  long pass = strtol(text, &end, 10);
  if (end == text) pass = 0;
  char *rest = end;
  long fail = strtol(rest, &end, 10);
  if (end == rest) fail = -1;
  int failing;
  if (pass > 0) {
    pass -= 1;
    failing = 0;
  } else if (fail < 0) {
    failing = 1;
  } else if (fail > 0) {
    fail -= 1;
    failing = 1;
  } else {
    failing = 0;
  }
  if (end != text) {
    int len = fail < 0 ? snprintf(text, sizeof text, "%ld\n", pass)
                       : snprintf(text, sizeof text, "%ld %ld\n", pass, fail);
    syscall(SYS_ftruncate, fd, 0L);
    syscall(SYS_pwrite64, fd, text, (size_t)len, 0L);
  }
  syscall(SYS_close, fd);
  return failing;
}

/* Whether this call on fd must fail: logs it when so. */
static int faulty(int fd, const char *class) {
  const char *control = getenv("A2_EIO_CONTROL");
  if (control == NULL || control[0] == '\0') return 0;
  const char *kind = watched_kind(fd);
  if (kind == NULL) return 0;
  char file[4096];
  int fail = 0;
  pthread_mutex_lock(&lock);
  snprintf(file, sizeof file, "%s/%s-%s", control, class, kind);
  fail = consume(file);
  if (!fail) {
    snprintf(file, sizeof file, "%s/%s", control, class);
    fail = consume(file);
  }
  if (fail) {
    /* A disk that dies: from its first fault on, every write and sync
     * fails. */
    snprintf(file, sizeof file, "%s/die", control);
    if (access(file, F_OK) == 0) {
      const char *dead[] = {"write", "sync"};
      for (int i = 0; i < 2; i++) {
        snprintf(file, sizeof file, "%s/%s", control, dead[i]);
        long made = raw_open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (made >= 0) syscall(SYS_close, made);
      }
    }
    char line[64];
    int len = snprintf(line, sizeof line, "%s %s\n", class, kind);
    snprintf(file, sizeof file, "%s/log", control);
    long log = raw_open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log >= 0) {
      syscall(SYS_write, log, line, (size_t)len);
      syscall(SYS_close, log);
    }
  }
  pthread_mutex_unlock(&lock);
  return fail;
}

#define FAIL_IF(fd, class)    \
  do {                        \
    if (faulty(fd, class)) {  \
      errno = EIO;            \
      return -1;              \
    }                         \
  } while (0)

ssize_t read(int fd, void *buf, size_t count) {
  FAIL_IF(fd, "read");
  return syscall(SYS_read, fd, buf, count);
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
  FAIL_IF(fd, "read");
  return syscall(SYS_pread64, fd, buf, count, offset);
}

ssize_t pread64(int fd, void *buf, size_t count, off64_t offset) {
  FAIL_IF(fd, "read");
  return syscall(SYS_pread64, fd, buf, count, offset);
}

ssize_t write(int fd, const void *buf, size_t count) {
  FAIL_IF(fd, "write");
  return syscall(SYS_write, fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
  FAIL_IF(fd, "write");
  return syscall(SYS_pwrite64, fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
  FAIL_IF(fd, "write");
  return syscall(SYS_pwrite64, fd, buf, count, offset);
}

int ftruncate(int fd, off_t length) {
  FAIL_IF(fd, "write");
  return (int)syscall(SYS_ftruncate, fd, length);
}

int ftruncate64(int fd, off64_t length) {
  FAIL_IF(fd, "write");
  return (int)syscall(SYS_ftruncate, fd, length);
}

int fsync(int fd) {
  FAIL_IF(fd, "sync");
  return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd) {
  FAIL_IF(fd, "sync");
  return (int)syscall(SYS_fdatasync, fd);
}
