# The Session example of include/weft/session.hpp must be the code tests/package/session_example.cc
# compiles and runs (issue 10, item 1: the comment had drifted into code that did not compile). Compares
# the header's "//   " lines before `#pragma once` with the lines between the .cc's begin/end markers
# (indented by 2); any difference fails the test and is shown by diff.
#   cmake -DHEADER=include/weft/session.hpp -DSOURCE=tests/package/session_example.cc -DWORK_DIR=dir
#         -P doc_example.cmake
# Whole texts, not CMake lists: the C++ lines hold semicolons.
file(READ ${HEADER} header)
string(FIND "${header}" "#pragma once" end)
if(end LESS 0)
  message(FATAL_ERROR "${HEADER}: no #pragma once")
endif()
string(SUBSTRING "${header}" 0 ${end} header)
string(REGEX MATCHALL "(^|\n)//   [^\n]*" doc_lines "${header}")
set(doc "")
foreach(line IN LISTS doc_lines)  # a line holding ';' is split; the pieces are joined back with ';'
  if(line MATCHES "^\n?//   ")
    string(REGEX REPLACE "^\n?//   " "\n" line "${line}")
    string(APPEND doc "${line}")
  else()
    string(APPEND doc ";${line}")
  endif()
endforeach()

file(READ ${SOURCE} source)
set(begin_marker "  // ---- begin: the example of include/weft/session.hpp ----\n")
string(FIND "${source}" "${begin_marker}" b)
string(FIND "${source}" "  // ---- end ----" e)
if(b LESS 0 OR e LESS b)
  message(FATAL_ERROR "${SOURCE}: the begin/end markers of the example are missing")
endif()
string(LENGTH "${begin_marker}" n)
math(EXPR b "${b} + ${n}")
math(EXPR len "${e} - ${b}")
string(SUBSTRING "${source}" ${b} ${len} code)
string(REGEX REPLACE "\n$" "" code "${code}")
string(PREPEND code "\n")
string(REPLACE "\n  " "\n" code "${code}")

if(doc STREQUAL "" OR code STREQUAL "\n")
  message(FATAL_ERROR "no example found in ${HEADER} or ${SOURCE}")
endif()
if(NOT doc STREQUAL code)
  file(MAKE_DIRECTORY ${WORK_DIR})
  file(WRITE ${WORK_DIR}/header_example.txt "${doc}\n")
  file(WRITE ${WORK_DIR}/source_example.txt "${code}\n")
  execute_process(COMMAND diff -u ${WORK_DIR}/header_example.txt ${WORK_DIR}/source_example.txt OUTPUT_VARIABLE d)
  message(FATAL_ERROR "the example of ${HEADER} differs from the one ${SOURCE} compiles:\n${d}")
endif()
string(REGEX MATCHALL "\n" newlines "${doc}")
list(LENGTH newlines count)
message(STATUS "the ${count} lines of the example are identical")
