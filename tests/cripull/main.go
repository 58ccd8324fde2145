// Command cripull is a test-only CRI client for
// tests/157-cri-credentials.bats: one runtime.v1 ImageService PullImage
// with an AuthConfig crictl cannot send (identity_token, registry_token,
// server_address). The AuthConfig is read as JSON from stdin (its
// protobuf JSON names: username, password, auth, server_address,
// identity_token, registry_token), never from argv.
//
//	cripull -socket /path/cri.sock -image REF [-timeout 60s] <auth.json
//
// It prints "image_ref=REF" and exits 0, or prints "code=CODE message=MSG"
// and exits 1; exit 2 is a usage or input error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	socket := flag.String("socket", "", "the CRI image service's unix socket path")
	image := flag.String("image", "", "the image to pull")
	timeout := flag.Duration("timeout", 60*time.Second, "the request's deadline")
	flag.Parse()
	if *socket == "" || *image == "" {
		fmt.Fprintln(os.Stderr, "cripull: -socket and -image are required")
		os.Exit(2)
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cripull: reading stdin:", err)
		os.Exit(2)
	}
	var a struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		Auth          string `json:"auth"`
		ServerAddress string `json:"server_address"`
		IdentityToken string `json:"identity_token"`
		RegistryToken string `json:"registry_token"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		fmt.Fprintln(os.Stderr, "cripull: stdin is not an AuthConfig JSON object")
		os.Exit(2)
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cripull:", err)
		os.Exit(2)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	res, err := runtimeapi.NewImageServiceClient(conn).PullImage(ctx, &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: *image},
		Auth: &runtimeapi.AuthConfig{Username: a.Username, Password: a.Password, Auth: a.Auth, ServerAddress: a.ServerAddress,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken},
	})
	if err != nil {
		st := status.Convert(err)
		fmt.Printf("code=%s message=%s\n", st.Code(), st.Message())
		os.Exit(1)
	}
	fmt.Printf("image_ref=%s\n", res.GetImageRef())
}
