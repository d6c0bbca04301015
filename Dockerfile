# syntax=docker/dockerfile:1
# fitgate's container image: `fitgate serve` (controllers + webhook) and the CLI.
#
#   docker build -t <registry>/fitgate:0.1.0 .
#
# Stage 1 compiles the Cython core (fitcore/*.pyx) and installs fitgate with its
# dependencies into a virtual environment; stage 2 copies only that environment onto the
# same slim Python base, without a compiler, and runs as an unprivileged user. The runtime
# writes nothing outside /tmp (the chart mounts an emptyDir there and sets
# readOnlyRootFilesystem), and bytecode is compiled at build time.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the package build reads (pyproject.toml's readme and license, setup.py, the
# two packages); tests, e2e and benchmarks stay out (see .dockerignore).
COPY pyproject.toml setup.py README.md LICENSE ./
COPY fitcore/ fitcore/
COPY admission/ admission/
RUN python -m venv /opt/fitgate \
    && /opt/fitgate/bin/pip install --upgrade pip \
    && /opt/fitgate/bin/pip install . \
    && /opt/fitgate/bin/python -m compileall -q /opt/fitgate/lib
# Fail the build if the compiled core is missing from the installed package (no silent
# pure-Python fallback). Run from / so that /src/fitcore (no .so) does not shadow it.
WORKDIR /
RUN /opt/fitgate/bin/python -c "import fitcore._alloc, fitcore._read, admission.certs, admission.cli" \
    && /opt/fitgate/bin/fitgate --help > /dev/null

FROM ${PYTHON_IMAGE}
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
