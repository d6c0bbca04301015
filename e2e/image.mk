# fitgate's container image, built offline (included by the Makefile). See the Dockerfile
# and e2e/cluster/container/build-image.sh.
#   make image          build fitgate:latest (warm: skipped when no input changed)
#   make image-test     build, then run it as the chart does (e2e/tests/test_image.py)
#   make engine-stop    stop the private dockerd, if one was started

.PHONY: image image-test engine-stop

image: setup
	nice -n 10 e2e/cluster/container/build-image.sh $(PY)

image-test: image
	eval "$$(e2e/cluster/container/engine.sh)" && \
	$(PY) -m pytest e2e/tests/test_image.py -q -o timeout_func_only=true -p no:cacheprovider

engine-stop:
	e2e/cluster/container/engine.sh stop

# `make e2e` (part of `make test`) builds the image first; e2e/tests/test_image.py runs it.
e2e: image
