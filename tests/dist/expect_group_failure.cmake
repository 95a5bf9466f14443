# cmake -DCOMMAND="mpirun|-n|2|...|program|case" -DEXPECT=text -DLIMIT=seconds -P expect_group_failure.cmake
# Runs COMMAND ("|" between arguments) and passes only if it exits non-zero within LIMIT seconds
# with EXPECT on its stderr: when one rank of a group fails, every process must end, soon.
string(REPLACE "|" ";" command "${COMMAND}")
string(TIMESTAMP start "%s" UTC)
# The TIMEOUT is a last resort, past mpirun's own --timeout; LIMIT is what the test asserts.
execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
string(TIMESTAMP end "%s" UTC)
math(EXPR seconds "${end} - ${start}")
message(STATUS "exit ${result} after about ${seconds} s; stderr:\n${err}")
if(result STREQUAL "0")
  message(FATAL_ERROR "the group exited 0, though one of its ranks failed")
endif()
if(seconds GREATER LIMIT)
  message(FATAL_ERROR "the group took ${seconds} s to end (more than ${LIMIT} s): a rank hung")
endif()
string(FIND "${err}" "${EXPECT}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "stderr does not say \"${EXPECT}\"")
endif()
