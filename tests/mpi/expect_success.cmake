# Runs COMMAND (a ;-list) and passes only if it exits 0 within ctest's TIMEOUT and its combined output
# matches every regex of PATTERNS (a ;-list). This replaces ctest's PASS_REGULAR_EXPRESSION, which makes
# ctest ignore the exit status (a program that finds wrong results, prints its report and exits 1 passed).
#   cmake "-DCOMMAND=prog;arg" "-DPATTERNS=re1;re2" -P expect_success.cmake
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "exit status ${rc}, expected 0:\n${all}")
endif()
foreach(pattern IN LISTS PATTERNS)
  if(NOT all MATCHES "${pattern}")
    message(FATAL_ERROR "output lacks /${pattern}/:\n${all}")
  endif()
endforeach()
message(STATUS "exit 0, output as expected:\n${all}")
