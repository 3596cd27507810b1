// One LoRAAdapter from TypeScript: one custom resource, served by the plugin in ../../provider
// (Pulumi.yaml names it under plugins.providers), the same provider Python programs run.
import * as pulumi from "@pulumi/pulumi";

/** The inputs of pulumi-lora:index:LoRAAdapter (../../provider/schema.json). */
interface LoRAAdapterArgs {
    adapterName: pulumi.Input<string>;
    path: pulumi.Input<string>;
    inferenceService: pulumi.Input<string>;
    namespace?: pulumi.Input<string>;
    pinned?: pulumi.Input<boolean>;
    readinessPolicy?: pulumi.Input<"AllReadyPods" | "AnyReadyPod">;
    transport?: pulumi.Input<"direct" | "proxy" | "delegated">;
}

/** One pod's view of the adapter (the `pods` output): `ready` only when false, `path` only when
 * the pod serves another path than the declared one, `reason` and `error` only on failure. */
interface PodStatus {
    pod: string;
    loaded: boolean;
    ready?: boolean;
    path?: string;
    reason?: string;
    error?: string;
}

/**
 * A custom resource of the plugin's package: the engine asks the plugin to check, diff, create,
 * read, update and delete it, and the outputs named in the props arrive on the instance. A
 * generated SDK (`pulumi package add`) would write this class; the language host built here
 * cannot generate.
 */
class LoRAAdapter extends pulumi.CustomResource {
    public readonly loaded!: pulumi.Output<boolean>;
    public readonly pods!: pulumi.Output<PodStatus[]>;
    public readonly crName!: pulumi.Output<string>;

    constructor(name: string, args: LoRAAdapterArgs, opts?: pulumi.CustomResourceOptions) {
        const outputs = { loaded: undefined, pods: undefined, crName: undefined };
        super("pulumi-lora:index:LoRAAdapter", name, { ...args, ...outputs }, opts);
    }
}

const config = new pulumi.Config();
const sql = new LoRAAdapter("sql", {
    adapterName: "sql-lora",
    path: "/adapters/sql-lora",
    inferenceService: config.get("inferenceService") ?? "llama",
    namespace: config.get("namespace") ?? "models",
    transport: (config.get("transport") ?? "direct") as "direct" | "proxy" | "delegated",
});

export const loaded = sql.loaded;
export const pods = sql.pods;
export const crName = sql.crName;
