// One LoRAAdapter from TypeScript: one custom resource, served by the plugin in ../../provider
// (Pulumi.yaml names it under plugins.providers), the same provider Python programs run. Its
// weights are where `path` says, or, with the config `source` set, staged from there onto the
// claim the InferenceService mounts (docs/staging.md); the output `path` is then the staged
// directory the pods load.
import * as pulumi from "@pulumi/pulumi";

/** The inputs of pulumi-lora:index:LoRAAdapter (../../provider/schema.json). */
interface LoRAAdapterArgs {
    adapterName: pulumi.Input<string>;
    /** Where the adapter already is in the sglang container; or give `source`. */
    path?: pulumi.Input<string>;
    /** hf://ORG/REPO@COMMIT, s3://BUCKET/PREFIX/ or https://HOST/PATH/: staged, then loaded. */
    source?: pulumi.Input<string>;
    /** File name to sha256; optional for an hf:// commit. */
    digests?: pulumi.Input<Record<string, pulumi.Input<string>>>;
    /** A Hub mirror or an S3-compatible endpoint. */
    sourceEndpoint?: pulumi.Input<string>;
    /** A Secret (in the InferenceService's namespace) with HF_TOKEN or AWS_* keys. */
    sourceSecretName?: pulumi.Input<string>;
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
    /** The directory the pods load: the declared `path`, or the staged one. */
    public readonly path!: pulumi.Output<string>;
    /** A staged adapter's content key (its directory's name on the claim). */
    public readonly contentKey!: pulumi.Output<string | undefined>;

    constructor(name: string, args: LoRAAdapterArgs, opts?: pulumi.CustomResourceOptions) {
        const outputs = {
            loaded: undefined,
            pods: undefined,
            crName: undefined,
            path: args.path,
            contentKey: undefined,
        };
        super("pulumi-lora:index:LoRAAdapter", name, { ...args, ...outputs }, opts);
    }
}

const config = new pulumi.Config();
const source = config.get("source");
const weights = source
    ? { source, sourceEndpoint: config.get("sourceEndpoint") }
    : { path: config.get("path") ?? "/adapters/sql-lora" };
const sql = new LoRAAdapter("sql", {
    adapterName: "sql-lora",
    ...weights,
    inferenceService: config.get("inferenceService") ?? "llama",
    namespace: config.get("namespace") ?? "models",
    transport: (config.get("transport") ?? "direct") as "direct" | "proxy" | "delegated",
});

export const loaded = sql.loaded;
export const pods = sql.pods;
export const crName = sql.crName;
export const path = sql.path;
// Only a staged adapter has one: exported otherwise, a preview would show it as unknown.
export const contentKey = source ? sql.contentKey : undefined;
