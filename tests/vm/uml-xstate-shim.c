/*
 * tests/vm/uml-xstate-shim.c: lets Debian's User-Mode Linux 6.1 run on a host whose XSAVE area is
 * larger than UML's own copy of it (Intel CPUs with AMX: the host kernel's user XSAVE size is
 * about 11 KiB with the AMX tile data, UML 6.1 keeps a fixed, smaller buffer).
 *
 * UML saves a guest task's FPU state with ptrace(PTRACE_GETREGSET, NT_X86_XSTATE) into that buffer,
 * which the host kernel fills only as far as it reaches, and restores it with PTRACE_SETREGSET from
 * the same buffer, which the host kernel refuses with EFAULT unless it holds the whole XSAVE area
 * (arch/x86/kernel/fpu/regset.c, xstateregs_set). The guest's init then dies at its first context
 * switch: "userspace - ptrace set fp regs failed, errno = 14", "Attempted to kill init!".
 *
 * Preloaded into the UML process (tests/vm/run does that), this wraps ptrace: a short
 * PTRACE_SETREGSET of NT_X86_XSTATE reads the traced process's whole current XSAVE area, lays UML's
 * bytes over its start and sets the whole area. Everything UML keeps (x87, SSE, AVX, AVX-512 and the
 * header) comes from UML; only what lies beyond its buffer (the AMX tile state, which no guest
 * process has asked the host for, so it is in its initial state) comes from the traced process.
 * Every other call goes to glibc's ptrace unchanged. Newer UML kernels size their buffer from the
 * host's CPUID and do not need this.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef long (*ptrace_fn)(int request, pid_t pid, void* addr, void* data);

/* Room for any XSAVE area a host has today (AMX: 11 008 bytes); one per thread, no allocation: UML
 * saves and restores registers from its signal handlers. */
enum { kXstateRoom = 64 * 1024 };
static _Thread_local unsigned char whole[kXstateRoom] __attribute__((aligned(64)));

static ptrace_fn real_ptrace(void) {
  static ptrace_fn real;
  if (real == NULL) real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
  return real;
}

long ptrace(enum __ptrace_request request, ...) {
  va_list args;
  va_start(args, request);
  pid_t pid = va_arg(args, pid_t);
  void* addr = va_arg(args, void*);
  void* data = va_arg(args, void*);
  va_end(args);

  ptrace_fn real = real_ptrace();
  if (real == NULL) {
    errno = ENOSYS;
    return -1;
  }
  if (request != PTRACE_SETREGSET || (uintptr_t)addr != NT_X86_XSTATE || data == NULL)
    return real(request, pid, addr, data);

  struct iovec* short_iov = data;
  struct iovec whole_iov = {whole, sizeof whole};
  /* The host fills as much as it has and says how much that was. */
  if (real(PTRACE_GETREGSET, pid, (void*)(uintptr_t)NT_X86_XSTATE, &whole_iov) != 0 ||
      short_iov->iov_len >= whole_iov.iov_len)
    return real(request, pid, addr, data);
  memcpy(whole, short_iov->iov_base, short_iov->iov_len);
  return real(request, pid, addr, &whole_iov);
}
