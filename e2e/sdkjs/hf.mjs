// Hugging Face's inference client for the browser (bundled by `make deps-sdk-js`).
export { InferenceClient } from '@huggingface/inference';
