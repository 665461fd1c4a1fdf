# syntax=docker/dockerfile:1
# The image manifests/ deploys (ghcr.io/carrel-dev/carrel): carrel, carrel-node-agent and
# carrel-syncer in /usr/local/bin, running as an unprivileged user.
#
#   docker build -t ghcr.io/carrel-dev/carrel:0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
# The workspace's manifests and members only, so target/ and the rest of the checkout stay out.
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY apiserver-shim apiserver-shim
COPY syncer syncer
COPY node-agent node-agent
COPY tests tests
COPY xtask xtask
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p carrel -p carrel-node-agent -p carrel-syncer \
 && install -D -m 0755 -t /out \
      target/release/carrel target/release/carrel-node-agent target/release/carrel-syncer

FROM debian:bookworm-slim
# The system's trust roots: `carrel serve` verifies admission webhooks that give no caBundle
# against them, as kube-apiserver does.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/carrel"]
