# karpenter-rs controller image: `docker build -t karpenter-rs:0.1.0 .` (docs/install.md).
# The chart runs `/karpenter controller` (charts/karpenter/templates/deployment.yaml).

# Build stage: the workspace's pinned toolchain (rust-version in Cargo.toml), locked dependencies.
# `--features aws`: the image runs both providers (`--cloud-provider sim|aws`); the default build
# leaves the aws provider and the AWS SDK out.
FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked --package karpenter --bin karpenter --features aws \
    && strip target/release/karpenter

# Runtime stage: glibc + CA certificates only, no shell, no package manager; non-root (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /src/target/release/karpenter /karpenter
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/karpenter"]
