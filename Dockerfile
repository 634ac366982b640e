# The wasmgpu image: the binary (controller, agent, CLI) and the shipped
# policies under /usr/share/wasmgpu/policies.
#   docker build -t ghcr.io/wasmgpu/wasmgpu:0.1.0 .
FROM rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p wasmgpu \
 && cargo build --locked --target wasm32-wasip2 --profile policy -p wasmgpu-binpack -p wasmgpu-spread

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/wasmgpu /usr/bin/wasmgpu
COPY --from=build /src/target/wasm32-wasip2/policy/wasmgpu_binpack.wasm /usr/share/wasmgpu/policies/binpack.wasm
COPY --from=build /src/target/wasm32-wasip2/policy/wasmgpu_spread.wasm /usr/share/wasmgpu/policies/spread.wasm
# Two malloc arenas rather than one per thread that ever allocated (glibc's
# default, up to eight per core): each arena keeps its peak, and the
# controller's threads multiply when tasks wait for the index off tokio's
# workers. 80–115 MiB less at 10,000 nodes (docs/BENCHMARKS.md, "The index
# lock off the workers").
ENV GLIBC_TUNABLES=glibc.malloc.arena_max=2
USER 65532:65532
ENTRYPOINT ["/usr/bin/wasmgpu"]
