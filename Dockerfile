# hermes-server: a slim image installed from the committed pins, run as a non-root user.
FROM python:3.11-slim AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HERMES_DATA_DIR=/data

WORKDIR /app
# bubblewrap: the sandbox of the shell and code tools (util-linux's prlimit is in the base).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
# The sandbox's data-and-documents Python (pandas, matplotlib, pypdf…: what commands, the code
# tool and read_file's document extraction run), from its pins, read-only for every sandbox.
COPY deploy/sandbox-python ./deploy/sandbox-python
RUN deploy/sandbox-python/build /opt/sandbox-python
# Dependencies first, from the lock, so code changes do not re-resolve them.
COPY constraints.txt pyproject.toml README.md ./
COPY server ./server
COPY hermes_core ./hermes_core
RUN pip install -c constraints.txt . \
    && useradd --system --uid 10001 --home-dir /data hermes \
    && mkdir -p /data /shared && chown hermes /data /shared

USER hermes
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status == 200 else 1)"

ENTRYPOINT ["hermes-server"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
