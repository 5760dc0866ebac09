# Runs PROGRAM with ARGS (a ;-list) and passes only if it exits non-zero and its stderr or stdout matches
# the regular expression EXPECTED: an invalid configuration must be refused with the library's message.
#   cmake -DPROGRAM=... "-DARGS=a;b;c" -DEXPECTED=regex -P expect_failure.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit status: ${rc}\nstdout:\n${out}\nstderr:\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit status")
endif()
if(NOT "${err}${out}" MATCHES "${EXPECTED}")
  message(FATAL_ERROR "the output does not match: ${EXPECTED}")
endif()
