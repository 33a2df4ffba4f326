# Fails when a libshaper layer can include, or does include, what it may not (docs/architecture.md,
# "Layers"). Run by CTest (tests/layers/CMakeLists.txt) as
#   cmake -DSOURCE_DIR=<checkout> -DBINARY_DIR=<build> -DCXX_COMPILER=<c++> -DWORK_DIR=<dir> -P check_layers.cmake
#
# Two checks, since each misses what the other sees:
#  1. The build enforces it. For each layer's target, the compile command of one of its own sources
#     (from compile_commands.json: its include directories, defines and flags, exactly) compiles a
#     one-line probe per header the layer must not see (every header of a layer it does not link,
#     libnl's <netlink/netlink.h> outside kernel/, daemon, ctl and protocol headers); each must fail
#     because that header is not found. One header of each layer it does link must compile, so a
#     broken probe cannot pass for a refused one.
#  2. The sources say it. Every #include under libshaper/<layer>/ names a header of a layer it may
#     include, a file beside it (trace's private headers) or a system header; never <netlink/...>
#     outside kernel/, never Boost. This catches an include that (1) would only catch at build time,
#     e.g. netem_simulator.cpp including "shaper/netem_engine.hpp" again, even where someone has
#     widened a target's include path to make it build.

cmake_minimum_required(VERSION 3.25)  # IN_LIST, string(JSON)

foreach(var SOURCE_DIR BINARY_DIR CXX_COMPILER WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_layers.cmake needs -D${var}=...")
  endif()
endforeach()

# What each layer may include (itself and these); the table docs/architecture.md draws.
set(layers core trace model compile kernel)
set(may_core core)
set(may_trace core trace)
set(may_model core model)
set(may_compile core trace model compile)
set(may_kernel core model kernel)

set(failures "")
macro(fail text)
  list(APPEND failures "${text}")
endmacro()

# Headers of each layer, as included ("shaper/x.hpp").
foreach(layer ${layers})
  file(GLOB headers RELATIVE ${SOURCE_DIR}/libshaper/${layer}/include
       ${SOURCE_DIR}/libshaper/${layer}/include/shaper/*.hpp)
  if(NOT headers)
    message(FATAL_ERROR "libshaper/${layer}/include/shaper/ has no headers: the layout changed, update this check")
  endif()
  list(SORT headers)
  set(headers_${layer} ${headers})
  foreach(h ${headers})
    set(owner_${h} ${layer})
  endforeach()
endforeach()

# Headers of the programs above libshaper, as they are included.
set(upper_headers "")
foreach(dir daemon ctl)
  file(GLOB hs RELATIVE ${SOURCE_DIR}/${dir} ${SOURCE_DIR}/${dir}/*.hpp)
  list(APPEND upper_headers ${hs})
endforeach()
file(GLOB_RECURSE protocol_headers ${SOURCE_DIR}/protocol/*.hpp)
foreach(p ${protocol_headers})
  if(p MATCHES "/include/(.+)$")
    list(APPEND upper_headers ${CMAKE_MATCH_1})
  else()
    get_filename_component(name ${p} NAME)
    list(APPEND upper_headers ${name})
  endif()
endforeach()

# ---------------------------------------------------------------------------------------------------
# 1. The build enforces it.

file(READ ${BINARY_DIR}/compile_commands.json commands)
string(JSON count LENGTH "${commands}")
math(EXPR last "${count} - 1")
file(MAKE_DIRECTORY ${WORK_DIR})

foreach(layer ${layers})
  # The compile command of the first source of shaper_<layer>.
  unset(layer_command)
  foreach(i RANGE ${last})
    string(JSON command GET "${commands}" ${i} command)
    if(command MATCHES "CMakeFiles/shaper_${layer}\\.dir/")
      string(JSON directory GET "${commands}" ${i} directory)
      set(layer_command "${command}")
      break()
    endif()
  endforeach()
  if(NOT DEFINED layer_command)
    fail("no compile command for shaper_${layer} in compile_commands.json")
    continue()
  endif()
  # Without the launcher (ccache) and without the object and source: the probe takes their place.
  separate_arguments(args UNIX_COMMAND "${layer_command}")
  list(FIND args "${CXX_COMPILER}" at)
  if(at GREATER 0)
    list(SUBLIST args ${at} -1 args)
  endif()
  list(FIND args "-o" at)
  list(REMOVE_AT args ${at})
  list(REMOVE_AT args ${at})  # the object file
  list(FIND args "-c" at)
  list(REMOVE_AT args ${at})
  list(REMOVE_AT args ${at})  # the source file

  set(refused "")
  set(seen "")
  foreach(other ${layers})
    if(other IN_LIST may_${layer})
      list(GET headers_${other} 0 first)
      list(APPEND seen "\"${first}\"")
    else()
      foreach(h ${headers_${other}})
        list(APPEND refused "\"${h}\"")
      endforeach()
    endif()
  endforeach()
  foreach(h ${upper_headers})
    list(APPEND refused "\"${h}\"")
  endforeach()
  if(NOT layer STREQUAL "kernel")
    list(APPEND refused "<netlink/netlink.h>")
  endif()

  set(n 0)
  foreach(include ${seen} ${refused})
    math(EXPR n "${n} + 1")
    set(probe ${WORK_DIR}/${layer}_${n}.cpp)
    file(WRITE ${probe} "#include ${include}\n")
    execute_process(COMMAND ${args} -fsyntax-only ${probe} WORKING_DIRECTORY ${directory}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    string(REGEX REPLACE "^[<\"](.*)[>\"]$" "\\1" name "${include}")
    if(include IN_LIST seen)
      if(NOT rc EQUAL 0)
        fail("shaper_${layer} cannot compile #include ${include}, which it may include:\n${out}")
      endif()
    elseif(rc EQUAL 0)
      fail("shaper_${layer} can include ${include}: it must not see that header")
    elseif(NOT out MATCHES "${name}: No such file or directory|'${name}' file not found")
      fail("shaper_${layer}: #include ${include} failed for another reason than a header not found:\n${out}")
    endif()
  endforeach()
  list(LENGTH refused refused_count)
  message(STATUS "shaper_${layer}: ${refused_count} headers refused, may include ${may_${layer}}")
endforeach()

# ---------------------------------------------------------------------------------------------------
# 2. The sources say it.

foreach(layer ${layers})
  file(GLOB_RECURSE files ${SOURCE_DIR}/libshaper/${layer}/*.cpp ${SOURCE_DIR}/libshaper/${layer}/*.hpp)
  foreach(f ${files})
    file(RELATIVE_PATH rel ${SOURCE_DIR} ${f})
    get_filename_component(dir ${f} DIRECTORY)
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line ${lines})
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
        set(name ${CMAKE_MATCH_1})
        if(DEFINED owner_${name})
          if(NOT owner_${name} IN_LIST may_${layer})
            fail("${rel}: includes \"${name}\" of libshaper/${owner_${name}}/; ${layer}/ may include only ${may_${layer}}")
          endif()
        elseif(NOT EXISTS ${dir}/${name})
          fail("${rel}: includes \"${name}\", which is neither a libshaper header nor beside it")
        endif()
      elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<([^>]+)>")
        set(name ${CMAKE_MATCH_1})
        if(name MATCHES "^netlink/" AND NOT layer STREQUAL "kernel")
          fail("${rel}: includes <${name}> of libnl; only kernel/ may")
        elseif(name MATCHES "^boost/")
          fail("${rel}: includes <${name}>; libshaper knows nothing of Boost or Asio")
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "libshaper's layers are broken:\n${text}")
endif()
message(STATUS "libshaper's layers hold")
