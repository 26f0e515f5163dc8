# chatd and chatctl in one image; docker-compose.yml runs each chatd role
# from it. Build: docker build -t chatd .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/chatd ./cmd/chatctl

FROM debian:bookworm-slim
# curl for the healthchecks (GET /readyz).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/chatd /out/chatctl /usr/local/bin/
USER 65532:65532
EXPOSE 8080
CMD ["chatd", "help"]
