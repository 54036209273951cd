# Installs the troupe build tree into a scratch prefix, then configures, builds and runs tests/install/consumer
# against it. Invoked by CTest: cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P install_test.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install_test.cmake needs -D${var}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(header base/error.h base/context.h base/spinlock.h engine/engine.h actors/context.h actors/error.h actors/runtime.h tensor/ndarray.h tensor/tensor.h tensor/storage.h
               tensor/resource.h op/operator.h op/simple_op.h op/optimizer.h graph/symbol.h graph/executor.h
               ops/ndarray.h ops/operator.h ops/graph/symbol.h)
  if(NOT EXISTS "${prefix}/include/troupe/${header}")
    message(FATAL_ERROR "installed tree lacks include/troupe/${header}")
  endif()
endforeach()
# troupe::proc is installed and exported, though not part of the umbrella target.
if(NOT EXISTS "${prefix}/include/troupe/proc/process.h")
  message(FATAL_ERROR "installed tree lacks include/troupe/proc/process.h")
endif()
# A build with CUDA has the GPU backend (base/gpu_module.h): it is installed beside the libraries, where their
# loader looks for it.
if(EXISTS "${BUILD_DIR}/base/libtroupe_gpu.so")
  file(GLOB installed_gpu_module "${prefix}/lib*/libtroupe_gpu.so")
  if(NOT installed_gpu_module)
    message(FATAL_ERROR "installed tree lacks the GPU backend, lib/libtroupe_gpu.so")
  endif()
endif()
file(GLOB_RECURSE internal_headers "${prefix}/include/*/internal/*" "${prefix}/include/*/detail/*")
if(internal_headers)
  message(FATAL_ERROR "internal or detail headers were installed: ${internal_headers}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer-build"
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/consumer-build" -j 2)
run("${WORK_DIR}/consumer-build/consumer")
message(STATUS "install test: consumer built against ${prefix} and ran")
