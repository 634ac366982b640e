package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcdServer is the embedded etcd and the level of its logger.
type etcdServer struct {
	*embed.Etcd
	logLevel zap.AtomicLevel
}

// stop closes etcd. Its listeners report their closing as errors, which are
// silenced: they are expected.
func (e *etcdServer) stop() {
	e.logLevel.SetLevel(zap.FatalLevel)
	e.Close()
}

// startEtcd starts a single-member etcd keeping its data under dir, without
// fsync (the data is thrown away at the end), serving plain HTTP on a free
// loopback port. It returns the client URL.
func startEtcd(dir string) (*etcdServer, string, error) {
	logLevel := zap.NewAtomicLevelAt(zap.WarnLevel)
	logConfig := zap.NewProductionConfig()
	logConfig.Level = logLevel
	logConfig.Sampling = nil
	logConfig.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	logConfig.OutputPaths = []string{"stderr"}
	logConfig.ErrorOutputPaths = []string{"stderr"}
	logger, err := logConfig.Build()
	if err != nil {
		return nil, "", fmt.Errorf("etcd's logger: %w", err)
	}
	var lastErr error
	// A port found free can be taken by someone else before etcd binds it:
	// try again with new ports then.
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return nil, "", err
		}
		client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
		peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}

		cfg := embed.NewConfig()
		cfg.Name = "wasmgpu"
		cfg.Dir = filepath.Join(dir, "etcd")
		cfg.UnsafeNoFsync = true
		cfg.Logger = "zap"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
		cfg.ListenClientUrls = []url.URL{client}
		cfg.AdvertiseClientUrls = []url.URL{client}
		cfg.ListenPeerUrls = []url.URL{peer}
		cfg.AdvertisePeerUrls = []url.URL{peer}
		cfg.ListenMetricsUrls = nil
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			_ = os.RemoveAll(cfg.Dir)
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			return nil, "", fmt.Errorf("starting etcd: %w", err)
		}
		select {
		case <-e.Server.ReadyNotify():
			return &etcdServer{Etcd: e, logLevel: logLevel}, client.String(), nil
		case err := <-e.Err():
			e.Close()
			return nil, "", fmt.Errorf("etcd failed while starting: %w", err)
		case <-time.After(time.Minute):
			e.Close()
			return nil, "", errors.New("etcd was not ready after a minute")
		}
	}
	return nil, "", fmt.Errorf("starting etcd: no free ports after 5 tries: %w", lastErr)
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
