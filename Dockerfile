# fitgate's container image: `fitgate serve` (controllers + webhook) and the CLI.
#
#   make image          (offline; tags fitgate:latest and fitgate:src-<hash of the inputs>)
#
# `make image` (e2e/cluster/container/build-image.sh) prepares the two things this file
# needs, so the build itself reaches no registry and no package index:
# - PYTHON_IMAGE, a Debian bookworm minbase with Python 3.11 made by mmdebstrap and
#   `docker import`ed (e2e/cluster/container/base.sh). Any image with a `python3` that is
#   CPython 3.11 on glibc >= 2.36 works too, e.g. python:3.11-slim-bookworm where a
#   registry is reachable (the wheels are built for the host's CPython 3.11).
# - build/wheelhouse: wheels for fitgate (its Cython core compiled on the host) and every
#   dependency, from `pip wheel` on the host; installed here with `--no-index`.
# The legacy builder is enough (no `# syntax` line, which would pull a frontend image).
#
# Stage 1 installs the wheels into a virtual environment; stage 2 copies only that
# environment onto the same base, without the wheels, and runs as an unprivileged user.
# The runtime writes nothing outside /tmp (the chart mounts an emptyDir there and sets
# readOnlyRootFilesystem), and bytecode is compiled at build time.
# e2e/tests/test_image.py runs the result as the chart does.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# Both stages carry the label, so build-image.sh prunes the builder stage's leftover image
# (and earlier builds) without touching anyone else's dangling images.
LABEL org.fitgate.image=1
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY build/wheelhouse/ /wheels/
RUN python3 -m venv --without-pip /opt/fitgate \
    && python3 -m venv /tmp/pipvenv \
    && /tmp/pipvenv/bin/pip install --quiet --no-index --find-links /wheels pip \
    && /tmp/pipvenv/bin/pip --python /opt/fitgate/bin/python install --quiet --no-index \
        --find-links /wheels fitgate \
    && /opt/fitgate/bin/python -m compileall -q /opt/fitgate/lib
# Fail the build if the compiled core is missing from the installed package (no silent
# pure-Python fallback).
WORKDIR /
RUN /opt/fitgate/bin/python -c "import fitcore._alloc, fitcore._call, fitcore._read, fitcore._load, fitcore._project" \
    && /opt/fitgate/bin/fitgate --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.fitgate.image=1
COPY --from=builder /opt/fitgate /opt/fitgate
ENV PATH=/opt/fitgate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# A numeric non-root user (the chart's runAsUser), so runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /tmp
EXPOSE 9443 8080 8081
ENTRYPOINT ["fitgate"]
CMD ["serve", "--config=/etc/fitgate/config.yaml"]
