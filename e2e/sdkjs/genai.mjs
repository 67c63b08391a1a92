// Google's Gen AI JS SDK (Gemini) for the browser (bundled by `make deps-sdk-js`).
export { GoogleGenAI } from '@google/genai';
