# syntax=docker/dockerfile:1
# render-service: the CPU render/derender tier (drop-in for `vllm launch render`) and gateway.
#
#   docker build -t render-service .
#   docker run -p 8000:8000 render-service                               # embedded Qwen3 default
#   docker run -p 8000:8000 -v /srv/models/Qwen3-8B:/models/qwen3:ro \
#       -e MODEL=/models/qwen3 -e RENDER_SERVICE_REASONING_PARSER=qwen3 render-service
#   docker run render-service gateway --engine http://engine:8000        # the OpenAI gateway
#
# Every CLI flag may be given as RENDER_SERVICE_<FLAG> (see docs/deployment.md). Replicas
# behind one load balancer must share a stream-state secret: mount it as a file and set
# RENDER_SERVICE_STREAM_STATE_SECRET_FILE, or set RENDER_SERVICE_STREAM_STATE_SECRET.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: wheels and the virtual environment -------------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# README.md* : the readme is optional to the build (the glob lets COPY pass without it).
COPY pyproject.toml README.md* ./
COPY render_service ./render_service
COPY parsers ./parsers
COPY docker/install.sh /usr/local/bin/render-service-install
# The one install recipe, also run by CI in a fresh venv (tests/deploy/test_image_install.py).
RUN ["sh", "/usr/local/bin/render-service-install", "/src", "/opt/render-service", "/tmp/wheels"]

# ---- final: Python, the venv, no compiler, no build tree -----------------------------------
FROM ${PYTHON_IMAGE}
ARG UID=10001
LABEL org.opencontainers.image.title="render-service" \
      org.opencontainers.image.description="CPU render/derender tier for vLLM tokens-only engines" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid "${UID}" render \
    && useradd --system --uid "${UID}" --gid render --home-dir /home/render --create-home \
       --shell /usr/sbin/nologin render
COPY --from=builder /opt/render-service /opt/render-service
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/render-service-entrypoint
ENV PATH=/opt/render-service/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/tmp/huggingface \
    RENDER_SERVICE_HOST=0.0.0.0 \
    RENDER_SERVICE_PORT=8000 \
    RENDER_SERVICE_WORKERS=1
USER ${UID}:${UID}
WORKDIR /home/render
EXPOSE 8000
# stdlib only: no curl in the image. Any answer but 200 (or none in 4 s) is unhealthy. The
# probe reads the server's own --host/--port (or RENDER_SERVICE_HOST/PORT) from /proc/1, so
# `docker run IMAGE serve --port 9000` is probed on 9000 (render_service/healthcheck.py).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys; from render_service.healthcheck import probe; sys.exit(probe('/health'))"]
ENTRYPOINT ["/usr/local/bin/render-service-entrypoint"]
CMD ["serve"]
