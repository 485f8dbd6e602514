# The twin service as a container: `docker build -t mbsd-twin .` then
#   docker run --rm -p 9108:9108 -e MBSD_TWIN_BROKER=mqtt://broker-host:1883 mbsd-twin
# Configuration: MBSD_TWIN_* environment variables (docs/service-config.md) and, optionally, a TOML file
# mounted into the container and named by MBSD_TWIN_CONFIG, e.g.
#   -v "$PWD/services/twin.toml:/config/twin.toml:ro" -e MBSD_TWIN_CONFIG=/config/twin.toml
# HTTP on MBSD_TWIN_METRICS_PORT: /healthz, /readyz, /metrics and the dashboard at /dashboard/.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 twin
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mbsd_twin ./mbsd_twin
COPY examples ./examples
# the same install command as the README's "Quick start"
RUN python -m pip install '.[twin,fmu]'

USER twin
ENV MBSD_TWIN_BROKER=mqtt://mosquitto:1883 \
    MBSD_TWIN_METRICS_HOST=0.0.0.0 \
    MBSD_TWIN_METRICS_PORT=9108 \
    NUMBA_CACHE_DIR=/home/twin/.cache/numba
# compile the engine's numba kernels once at build time (cached in NUMBA_CACHE_DIR), so a new
# container answers at once instead of compiling for about a minute on its first batch (-P: import the
# installed package, not /app/mbsd_twin, so the cache belongs to the files the service runs)
RUN python -P -c "from mbsd_twin.warmup import warm; warm()"
EXPOSE 9108

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MBSD_TWIN_METRICS_PORT', '9108'), timeout=4)"

# `twin serve` stops gracefully on SIGTERM (publishes offline, flushes, disconnects); exec form: it is PID 1
STOPSIGNAL SIGTERM
CMD ["mbsd-twin", "twin", "serve"]
