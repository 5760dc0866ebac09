# Runs PROGRAM with ARGS (a ;-list) and passes only if it exits non-zero and its stderr or stdout matches
# every regular expression of EXPECTED (a ;-list): an invalid configuration must be refused with the
# library's message, a wrong conformance case must be reported.
#   cmake -DPROGRAM=... "-DARGS=a;b;c" "-DEXPECTED=regex1;regex2" -P expect_failure.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit status: ${rc}\nstdout:\n${out}\nstderr:\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit status")
endif()
foreach(pattern IN LISTS EXPECTED)
  if(NOT "${err}${out}" MATCHES "${pattern}")
    message(FATAL_ERROR "the output does not match: ${pattern}")
  endif()
endforeach()
