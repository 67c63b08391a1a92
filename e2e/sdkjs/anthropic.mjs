// The Anthropic JS SDK for the browser (bundled by `make deps-sdk-js`).
export { default, Anthropic } from '@anthropic-ai/sdk';
