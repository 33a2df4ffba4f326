# Precompiled headers (option JITTERD_PCH): the third-party headers that dominate the test builds'
# compile time, Boost.Asio above all, then nlohmann/json and GoogleTest, parsed once per build and
# header set instead of once per source file (figures: docs/testing.md, "Precompiled headers").
#
#   set        headers                                        given to
#   json       nlohmann/json and common standard headers      the protocol, jitterctl's client
#   asio       Boost.Asio (daemon/asio.hpp) + json            the daemon's libraries and binary
#   test       json + GoogleTest                              test binaries without Asio
#   asio_test  asio + GoogleTest                              jitterd_protocol_tests
#
# Each set is compiled once, by a target of its own (jitterd_pch_<set>: one empty source) whose only
# flags are the build's, the set's usage requirements and our warnings; every user takes it with REUSE_FROM. A user
# may add definitions of its own (clang and GCC accept a PCH then, as long as the headers in it do not
# use them), so no user's flags end up in another's PCH. Not for targets whose flags differ from the
# holder's in what the compiler checks: libshaper (its sanitizer builds compile some files at -O1:
# clang refuses a PCH built at -O0 there) and fuzz_control (-fsanitize=fuzzer).
#
# The sources still include every header they use: the PCH is only put in front of them (-include),
# and a build with JITTERD_PCH=OFF must stay green.

set(jitterd_pch_json_headers
    <algorithm> <chrono> <cstdint> <functional> <map> <memory> <optional> <string> <string_view>
    <utility> <variant> <vector> <nlohmann/json.hpp>)
# <utility> (in the json set) before Asio: Boost 1.74's awaitable.hpp uses std::exchange without including it (daemon/asio.hpp).
set(jitterd_pch_asio_headers ${jitterd_pch_json_headers} <boost/asio.hpp>)
set(jitterd_pch_test_headers ${jitterd_pch_json_headers} <gtest/gtest.h>)
set(jitterd_pch_asio_test_headers ${jitterd_pch_asio_headers} <gtest/gtest.h>)

# The usage requirements each set's headers need (include paths and the Asio definitions).
set(jitterd_pch_json_libraries nlohmann_json::nlohmann_json)
set(jitterd_pch_asio_libraries nlohmann_json::nlohmann_json jitterd_asio)
set(jitterd_pch_test_libraries nlohmann_json::nlohmann_json GTest::gtest)
set(jitterd_pch_asio_test_libraries nlohmann_json::nlohmann_json jitterd_asio GTest::gtest)

# jitterd_precompile_headers(<target> <set>): <target>'s sources get <set>'s PCH (nothing without
# JITTERD_PCH). The set's holder is made on first use, in the caller's directory, where the set's
# imported targets (GTest::gtest from tests/) are visible.
function(jitterd_precompile_headers target set)
  if(NOT JITTERD_PCH)
    return()
  endif()
  if(NOT DEFINED jitterd_pch_${set}_headers)
    message(FATAL_ERROR "jitterd_precompile_headers(${target} ${set}): no header set '${set}' "
                        "(cmake/precompiled_headers.cmake lists json, asio, test and asio_test)")
  endif()
  # GCC 12 at -O1 reports a false -Warray-bounds inside std::string's operator+ (char_traits.h,
  # inlined into tests/calibration/validation_calibration_test.cpp) when the test sets' PCH is in
  # front; without it, quiet. -Werror makes that a failed build, so GCC builds the tests without.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND set MATCHES "test$")
    return()
  endif()
  set(holder jitterd_pch_${set})
  if(NOT TARGET ${holder})
    add_library(${holder} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_holder.cpp)
    # With our warning flags too: GCC refuses a PCH built without -Wpedantic in a file compiled with
    # it ("not used because `__cpp_runtime_arrays' not defined": -Wpedantic takes that macro away).
    target_link_libraries(${holder} PRIVATE ${jitterd_pch_${set}_libraries} jitterd_warnings)
    target_precompile_headers(${holder} PRIVATE ${jitterd_pch_${set}_headers})
    # clang stamps a PCH with its headers' modification times; unstamped, ccache can cache the
    # compiles that use it (with the sloppiness the top CMakeLists.txt names).
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      target_compile_options(${holder} PRIVATE "SHELL:-Xclang -fno-pch-timestamp")
    endif()
  endif()
  target_precompile_headers(${target} REUSE_FROM ${holder})
endfunction()
