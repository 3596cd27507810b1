// An Automation API inline program on the release's generated Go SDK (no Go language host can
// be had here: the program hosts its own language runtime): up, refresh with
// --expect-no-changes, destroy, on the stack config it is given. tests/release/test_release_install.py
// builds it beside the SDK unpacked into ./sdk (go.mod's replace) and runs it.
//
//	lora-go NAMESPACE KUBECONFIG
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/pulumi-lora/pulumi-lora/sdk/go/lora"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

func main() {
	ctx := context.Background()
	namespace, kubeconfig := os.Args[1], os.Args[2]
	program := func(pctx *pulumi.Context) error {
		sql, err := lora.NewLoRAAdapter(pctx, "sql", &lora.LoRAAdapterArgs{
			AdapterName:      pulumi.String("sql-lora"),
			Path:             pulumi.String("/adapters/sql-lora"),
			InferenceService: pulumi.String("llama"),
			Namespace:        pulumi.String(namespace),
			Transport:        lora.TransportDirect,
		})
		if err != nil {
			return err
		}
		pctx.Export("loaded", sql.Loaded)
		return nil
	}
	stack, err := auto.UpsertStackInlineSource(ctx, "dev", "lora-go", program)
	if err != nil {
		fail("stack", err)
	}
	if err := stack.SetConfig(ctx, "pulumi-lora:kubeconfig", auto.ConfigValue{Value: kubeconfig}); err != nil {
		fail("config", err)
	}
	up, err := stack.Up(ctx, optup.ProgressStreams(os.Stderr))
	if err != nil {
		fail("up", err)
	}
	fmt.Printf("loaded=%v\n", up.Outputs["loaded"].Value)
	if _, err := stack.Refresh(ctx, optrefresh.ExpectNoChanges(), optrefresh.ProgressStreams(os.Stderr)); err != nil {
		fail("refresh", err)
	}
	fmt.Println("refresh=clean")
	if _, err := stack.Destroy(ctx, optdestroy.ProgressStreams(os.Stderr)); err != nil {
		fail("destroy", err)
	}
	fmt.Println("destroy=done")
}

func fail(step string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", step, err)
	os.Exit(1)
}
