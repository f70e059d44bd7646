export { clampLimit } from '../domain/list-limit';
