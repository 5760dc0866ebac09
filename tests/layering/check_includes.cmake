# The include-direction check (issue 9): every layer includes only itself and the layers below it, so the
# arrows of docs/design.md hold in the code and not only in the CMake targets.
#
#   cmake -DROOT=<source dir> -P tests/layering/check_includes.cmake
#
# Layers, bottom up: core (src/core and the public headers of pure types) < array (src/array, the array
# library, and the public headers of arrays and their operations) < program (src/program, SSA programs) and
# transport < collectives < runtime; program and transport/collectives do not include each other
# (src/runtime and the public headers of the replica API). Which public header is in which layer is
# include/weft/layers.cmake's list, read here. A quoted #include is checked against the layer of
# the including file; a violation names the file, the line and the rule. Exit status non-zero on any
# violation (ctest `layering_includes`).
cmake_minimum_required(VERSION 3.20)
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<weft source dir> [-DMIN_FILES=20] -P check_includes.cmake")
endif()
if(NOT DEFINED MIN_FILES)
  set(MIN_FILES 20)  # fewer files checked means a wrong ROOT, not a clean tree
endif()

# The public headers by layer come from the manifest beside them (the real tree's, also for a test ROOT).
include(${CMAKE_CURRENT_LIST_DIR}/../../include/weft/layers.cmake)
set(core_public ${weft_core_public})
set(array_public ${weft_array_public})
set(program_public ${weft_program_public})
set(core_allowed "core/")
foreach(h ${core_public})
  list(APPEND core_allowed "weft/${h}.hpp")
endforeach()
set(array_allowed ${core_allowed} "array/")
foreach(h ${array_public})
  list(APPEND array_allowed "weft/${h}.hpp")
endforeach()
set(program_allowed ${array_allowed} "program/")
foreach(h ${program_public})
  list(APPEND program_allowed "weft/${h}.hpp")
endforeach()
set(transport_allowed ${array_allowed} "transport/")
set(collectives_allowed ${transport_allowed} "collectives/")

set(violations 0)
set(checked 0)
function(check_file file layer)
  set(allowed ${${layer}_allowed})
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  math(EXPR n "${checked} + 1")
  set(checked ${n} PARENT_SCOPE)
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" target "${line}")
    set(ok FALSE)
    foreach(prefix ${allowed})
      string(FIND "${target}" "${prefix}" at)
      if(at EQUAL 0)
        set(ok TRUE)
      endif()
    endforeach()
    # A header beside the file, by bare name, stays inside the layer.
    get_filename_component(dir ${file} DIRECTORY)
    if(NOT target MATCHES "/" AND EXISTS ${dir}/${target})
      set(ok TRUE)
    endif()
    if(NOT ok)
      file(RELATIVE_PATH rel ${ROOT} ${file})
      message("layering: ${rel} (layer ${layer}) includes \"${target}\", which is above it; ${layer} may include only: ${allowed}")
      math(EXPR v "${violations} + 1")
      set(violations ${v} PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

foreach(layer core array program)
  foreach(h ${${layer}_public})
    if(EXISTS ${ROOT}/include/weft/${h}.hpp)
      check_file(${ROOT}/include/weft/${h}.hpp ${layer})
    endif()
  endforeach()
endforeach()
foreach(layer core array program transport collectives)
  file(GLOB_RECURSE files ${ROOT}/src/${layer}/*.cc ${ROOT}/src/${layer}/*.hpp ${ROOT}/src/${layer}/*.inc)
  foreach(f ${files})
    check_file(${f} ${layer})
  endforeach()
endforeach()

if(checked LESS MIN_FILES)
  message(FATAL_ERROR "layering: only ${checked} files found under ${ROOT}: wrong ROOT?")
endif()
if(violations GREATER 0)
  message(FATAL_ERROR "layering: ${violations} include(s) point up a layer")
endif()
message("layering: ${checked} files of core, array, program, transport and collectives include nothing above their layer")
