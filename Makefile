# The two commands a newcomer needs:
#   make demo   install deps if missing, build, run one worker on the tiny model, submit prompts
#   make test   install deps, build (Release + ASan/UBSan), run every test
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# AUTO: the CUDA backend and kernels where nvidia-smi lists a GPU; ON: wherever nvcc is; OFF: never.
# From the environment or the command line (make test SLUICE_CUDA=ON); demo and test pass it on.
SLUICE_CUDA ?= AUTO
export SLUICE_CUDA

.PHONY: all build test demo deps clean

all: build

deps:
	bash ops/install-deps.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=$(SLUICE_CUDA) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

test: deps
	bash ops/run-tests.sh

demo:
	bash ops/demo.sh

clean:
	rm -rf $(BUILD) build-asan build-debug
