# Runs PROGRAM and compares its standard output byte for byte with the file EXPECTED.
execute_process(COMMAND ${PROGRAM} OUTPUT_VARIABLE actual RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}:\n${err}")
endif()
file(READ ${EXPECTED} expected)
if(NOT actual STREQUAL expected)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/actual_output.txt "${actual}")
  message(FATAL_ERROR "output differs from ${EXPECTED}; actual output written to "
                      "${CMAKE_CURRENT_BINARY_DIR}/actual_output.txt:\n${actual}")
endif()
