// Command sdkgen writes the generated SDKs of a Pulumi package schema, with the code generators
// the Pulumi CLI itself carries (github.com/pulumi/pulumi/pkg/v3/codegen), in-process.
//
//	sdkgen SCHEMA.json OUT_DIR nodejs go
//
// Why not `pulumi package gen-sdk`: CLI v3.274 asks the language host's GeneratePackage, which
// the hosts built here lack (see docs/development.md, "Language hosts"); the generators are the
// same Go packages those hosts call. Each language lands in OUT_DIR/<language>.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver"

	gogen "github.com/pulumi/pulumi/pkg/v3/codegen/go"
	"github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

const tool = "pulumi-lora-sdkgen"

// noDependencies is the loader of a schema that depends on no other package: any request for
// one is an error (pulumi-lora's schema names none).
type noDependencies struct{}

func (noDependencies) LoadPackage(name string, _ *semver.Version) (*schema.Package, error) {
	return nil, fmt.Errorf("the schema depends on package %q, which this tool does not load", name)
}

func (l noDependencies) LoadPackageV2(
	_ context.Context, d *schema.PackageDescriptor,
) (*schema.Package, error) {
	return l.LoadPackage(d.Name, d.Version)
}

func (noDependencies) LoadPackageReference(
	name string, _ *semver.Version,
) (schema.PackageReference, error) {
	return nil, fmt.Errorf("the schema depends on package %q, which this tool does not load", name)
}

func (l noDependencies) LoadPackageReferenceV2(
	_ context.Context, d *schema.PackageDescriptor,
) (schema.PackageReference, error) {
	return l.LoadPackageReference(d.Name, d.Version)
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: sdkgen SCHEMA.json OUT_DIR LANGUAGE...")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3:]); err != nil {
		fmt.Fprintln(os.Stderr, "sdkgen:", err)
		os.Exit(1)
	}
}

func run(schemaPath, out string, languages []string) error {
	raw, err := os.ReadFile(schemaPath)
	if err != nil {
		return err
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("%s: %w", schemaPath, err)
	}
	pkg, diags, err := schema.BindSpec(spec, noDependencies{}, schema.ValidationOptions{})
	if err != nil {
		return err
	}
	if diags.HasErrors() {
		return fmt.Errorf("the schema does not bind: %s", diags.Error())
	}
	for _, language := range languages {
		var files map[string][]byte
		switch language {
		case "nodejs":
			files, err = nodejs.GeneratePackage(tool, pkg, nil, nil, false, noDependencies{})
		case "go":
			files, err = gogen.GeneratePackage(tool, pkg, nil)
		default:
			return fmt.Errorf("no generator for %q here (nodejs, go)", language)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", language, err)
		}
		for name, data := range files {
			path := filepath.Join(out, language, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
