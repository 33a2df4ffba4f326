// The source of a jitterd_pch_<set> target (cmake/precompiled_headers.cmake): empty, it is there so
// that the target compiles its set's precompiled header, which its users take with REUSE_FROM.
