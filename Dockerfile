# syntax=docker/dockerfile:1
# The Drover image: one `drover` binary for every role (`drover server`, `drover executor`,
# `drover migrate`, `drover crd`). CPU only; Dockerfile.cuda builds the executor image with the GPU
# path (`--features cuda`).
#
#   docker build -t ghcr.io/drover-dev/drover:0.1.0 .
#   docker build --build-arg FEATURES=some-feature -t drover:dev .
#
# The build step is `cargo build --release --locked -p drover` with the toolchain rust-toolchain.toml
# pins, as on a developer's machine. No container is built by the test suite.

FROM rust:1.95-bookworm AS builder
# Cargo features of the `drover` package to build with, space- or comma-separated (default: none).
ARG FEATURES=""
WORKDIR /src
# The toolchain (and its components) exactly as rust-toolchain.toml names it.
COPY rust-toolchain.toml ./
RUN rustup toolchain install
COPY . .
# The registry and target directory are BuildKit caches, so the binary is copied out in this step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    if [ -n "$FEATURES" ]; then set -- --features "$FEATURES"; fi \
    && cargo build --release --locked -p drover "$@" \
    && install -D -m 0755 target/release/drover /out/drover

FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 drover \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/drover --no-create-home \
        --shell /usr/sbin/nologin drover \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/drover
COPY --from=builder /out/drover /usr/local/bin/drover
USER 10001:10001
WORKDIR /var/lib/drover
# REST API, dashboard and /metrics; the executor gateway (gRPC).
EXPOSE 8080 7070
ENTRYPOINT ["drover"]
CMD ["server"]
