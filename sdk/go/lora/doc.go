// LoRA adapters on SGLang in Kubernetes: LLMKube LoRAAdapter CRs loaded on every Ready replica, with drift seen by refresh.
package lora
