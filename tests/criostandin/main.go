// Command criostandin is the test suite's stand-in for CRI-O's runtime
// endpoint: it answers runtime.v1.RuntimeService/Version as CRI-O's
// server.Version does (version "0.1.0", runtime_name "cri-o", its
// runtime_version, runtime_api_version "v1"), and ImageService/ImageFsInfo
// with an empty answer, because crictl checks the image endpoint with that
// call (cri-api's validateServiceConnection) and pullhelper forwards it
// here. Every other call is Unimplemented. CRI-O itself cannot run here: Debian 12 packages
// no cri-o, and CRI-O needs conmon, a runtime and its own build. What the
// tests prove with it is pullhelper cri's side: the detection by Version,
// the store CRI-O's configuration names, and the image_ref CRI-O answers;
// the store is then read by podman, which shares CRI-O's containers-storage.
//
//	criostandin -listen PATH [-runtime-version V]
//
// It removes PATH when SIGTERM or SIGINT stops it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type standin struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	version string
}

type images struct {
	runtimeapi.UnimplementedImageServiceServer
}

// ImageFsInfo answers no filesystems (CRI-O would list its store's).
func (images) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// Version is CRI-O's server.Version: kubeAPIVersion "0.1.0",
// containerName "cri-o".
func (s *standin) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "cri-o", RuntimeVersion: s.version, RuntimeApiVersion: "v1"}, nil
}

func main() {
	listen := flag.String("listen", "", "unix socket `PATH` to serve on")
	version := flag.String("runtime-version", "1.36.0", "the runtime_version to answer")
	flag.Parse()
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "criostandin: -listen PATH is required")
		os.Exit(2)
	}
	l, err := net.Listen("unix", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "criostandin:", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, &standin{version: *version})
	runtimeapi.RegisterImageServiceServer(srv, images{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		srv.Stop()
	}()
	if err := srv.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "criostandin:", err)
	}
	os.Remove(*listen)
}
