# cmake -DFIRST="program|arg|..." -DSECOND="mpirun|-n|2|program|arg|..." -P expect_same_output.cmake
# Runs both commands ("|" between arguments); passes only if both exit 0 with the same stdout
# (a model split over processes must print what one process prints).
foreach(which FIRST SECOND)
  string(REPLACE "|" ";" command "${${which}}")
  execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE out_${which} ERROR_VARIABLE err TIMEOUT 100)
  if(NOT result STREQUAL "0")
    message(FATAL_ERROR "${which} command exited ${result}; stderr:\n${err}")
  endif()
endforeach()
if(out_FIRST STREQUAL "")
  message(FATAL_ERROR "the first command printed nothing")
endif()
if(NOT out_FIRST STREQUAL out_SECOND)
  message(FATAL_ERROR "the outputs differ:\n--- one process:\n${out_FIRST}\n--- split:\n${out_SECOND}")
endif()
message(STATUS "same output:\n${out_FIRST}")
