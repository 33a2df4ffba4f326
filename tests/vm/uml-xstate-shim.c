// Preloaded into Debian's UML kernel (linux.uml 6.1) by tests/vm/run: lets it restore a guest
// process's FPU state on a host whose XSAVE area is larger than the one UML knows.
//
// Why: UML sizes its FPU buffer from CPUID leaf 0xd (2696 bytes on an AVX-512 host) and restores it
// with ptrace(PTRACE_SETREGSET, NT_X86_XSTATE). A host kernel that also has AMX (Sapphire Rapids
// and later) wants exactly its whole user XSAVE size there (11008 bytes with AMX tile data;
// arch/x86/kernel/fpu/regset.c: xstateregs_set, "count != fpu_user_cfg.max_size" gives EFAULT),
// so UML's first restore failed, "userspace - ptrace set fp regs failed, errno = 14", and the guest
// panicked before running its init. Seen on 2026-12-04 (host kernel 6.18, Xeon with amx_tile).
//
// What: when that restore fails with EFAULT, retry it with a buffer of the host's size: UML's
// bytes first, the rest zero, and the AMX components (17 tile config, 18 tile data: beyond UML's
// buffer, and never used by a guest process, which cannot ask the UML kernel for AMX permission)
// cleared in the header's XSTATE_BV, so that the host puts them in their initial state. Every
// other call passes through unchanged.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef long (*ptrace_fn)(int, pid_t, void*, void*);

// The XSAVE header follows the 512-byte legacy area; XSTATE_BV is its first 64-bit word.
enum { kXsaveHeaderOffset = 512 };
// Larger than any XSAVE area so far (11008 bytes with AMX): GETREGSET tells the real size.
enum { kProbeSize = 64 * 1024 };
static const uint64_t kAmxComponents = (1ull << 17) | (1ull << 18);

static long retry_padded(ptrace_fn real, pid_t pid, struct iovec* uml) {
  static size_t host_size;
  if (host_size == 0) {
    void* probe = calloc(1, kProbeSize);
    if (!probe) return -1;
    struct iovec iov = {probe, kProbeSize};
    long got = real(PTRACE_GETREGSET, pid, (void*)NT_X86_XSTATE, &iov);
    free(probe);
    if (got < 0) return -1;
    host_size = iov.iov_len;
  }
  if (host_size <= uml->iov_len || uml->iov_len < kXsaveHeaderOffset + sizeof(uint64_t)) {
    errno = EFAULT;
    return -1;
  }
  unsigned char* padded = calloc(1, host_size);
  if (!padded) return -1;
  memcpy(padded, uml->iov_base, uml->iov_len);
  uint64_t xstate_bv;
  memcpy(&xstate_bv, padded + kXsaveHeaderOffset, sizeof xstate_bv);
  xstate_bv &= ~kAmxComponents;
  memcpy(padded + kXsaveHeaderOffset, &xstate_bv, sizeof xstate_bv);
  struct iovec iov = {padded, host_size};
  long r = real(PTRACE_SETREGSET, pid, (void*)NT_X86_XSTATE, &iov);
  int saved = errno;
  free(padded);
  errno = saved;
  return r;
}

long ptrace(enum __ptrace_request request, ...) {
  va_list ap;
  va_start(ap, request);
  pid_t pid = va_arg(ap, pid_t);
  void* addr = va_arg(ap, void*);
  void* data = va_arg(ap, void*);
  va_end(ap);
  static ptrace_fn real;
  if (!real) real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
  long r = real(request, pid, addr, data);
  if (r < 0 && errno == EFAULT && request == PTRACE_SETREGSET && (long)addr == NT_X86_XSTATE)
    return retry_padded(real, pid, data);
  return r;
}
